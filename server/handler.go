package server

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"

	"github.com/sourcegraph/jsonrpc2"

	"mspd/schema/msp"
	"mspd/session"
)

// CapabilitySessionListStream is the capability a client requests to be
// told of changes to its session list (session/listChanged,
// session/started of sessions other connections start,
// session/deleteCompleted).
const CapabilitySessionListStream = "sessionListStream"

// handler dispatches gated requests to the session manager. The read loop
// has up to Config.MaxConnRequests of a connection's requests handled at
// once (by default one, so that they are handled in order), and the
// handshake state is settled before the next frame is read.
type handler struct{ c *conn }

// Handle answers req, whose id is as the client sent it: echoed as it
// stands, not re-encoded (json.Marshal would escape '<', '>' and '&' in a
// string id as six bytes each). dispatched runs once the request has been
// dispatched, before its answer is queued: its params are no longer
// needed, and the answer may wait for a slow reader.
func (h *handler) Handle(ctx context.Context, req *jsonrpc2.Request, id json.RawMessage, dispatched func()) {
	if req.Notif {
		dispatched()
		return // the gate handles notifications
	}
	if h.c.credEnded.Load() {
		// Read before the close got through: refused, unanswered; the
		// close status tells the client why (see credentialEnded).
		dispatched()
		return
	}
	if follows(req.Method) {
		h.c.follow <- struct{}{}
		defer func() { <-h.c.follow }()
		if h.c.credEnded.Load() {
			// Ended while this request waited for the token.
			dispatched()
			return
		}
	}
	params := json.RawMessage("{}")
	if req.Params != nil {
		params = *req.Params
	}
	if name := h.c.clientName.Load(); name != nil {
		ctx = session.WithClientName(ctx, *name)
	}
	result, after, err := h.dispatch(ctx, req.Method, params)
	dispatched()
	if err != nil {
		h.c.srv.metrics.requestErrors.Add(1)
		h.c.replyError(id, toMSPError(err))
		return
	}
	if rerr := h.c.reply(id, result); rerr != nil {
		h.c.log.Debug("reply failed", "err", rerr)
	}
	// Even when the reply could not be sent: an admitted turn must launch
	// (a replay of its command finds it admitted), and a subscription on a
	// closed connection ends at once.
	if after != nil {
		after(ctx)
	}
}

// dispatch runs one request. after, when non-nil, runs once the response
// is queued: subscriptions and launches that must follow it on the wire.
func (h *handler) dispatch(ctx context.Context, method string, params json.RawMessage) (result any, after func(context.Context), err error) {
	c := h.c
	mgr := c.srv.mgr
	switch method {
	case msp.MethodInitialize:
		return h.initialize(params)
	case msp.MethodSessionStart:
		if err := c.mayNameServers(params); err != nil {
			return nil, nil, err
		}
		if err := h.roomToMake(ctx, params, false); err != nil {
			return nil, nil, err
		}
		res, attach, err := mgr.StartSession(ctx, c, params)
		return res, attach, err
	case msp.MethodSessionResume:
		if err := c.roomToFollow(requestIDs(params).SessionID); err != nil {
			return nil, nil, err
		}
		res, attach, err := mgr.ResumeSession(ctx, c, params)
		return res, attach, err
	case msp.MethodSessionRead:
		res, err := mgr.ReadSession(ctx, params)
		return res, nil, err
	case msp.MethodSessionList:
		res, err := mgr.ListSessions(ctx, params)
		return res, nil, err
	case msp.MethodSessionFork:
		if err := h.roomToMake(ctx, params, true); err != nil {
			return nil, nil, err
		}
		res, attach, err := mgr.ForkSession(ctx, c, params)
		return res, attach, err
	case msp.MethodSessionRename:
		res, err := mgr.RenameSession(ctx, params)
		return res, nil, err
	case msp.MethodSessionSetModel:
		res, err := mgr.SetModel(ctx, params)
		return res, nil, err
	case msp.MethodSessionSetApprovalMode:
		res, err := mgr.SetApprovalMode(ctx, params)
		return res, nil, err
	case msp.MethodSessionSetReasoningEffort:
		res, err := mgr.SetReasoningEffort(ctx, params)
		return res, nil, err
	case msp.MethodApprovalDecide:
		res, err := mgr.DecideApproval(ctx, params)
		return res, nil, err
	case msp.MethodApprovalListPending:
		res, err := mgr.ListPendingApprovals(ctx, params)
		return res, nil, err
	case msp.MethodSessionDelete:
		res, erase, err := mgr.DeleteSession(ctx, c, params)
		return res, erase, err
	case msp.MethodTurnStart:
		res, launch, err := mgr.StartTurn(ctx, c, params)
		return res, func(context.Context) { launch() }, err
	case msp.MethodSessionCompact:
		res, launch, err := mgr.CompactSession(ctx, c, params)
		return res, func(context.Context) { launch() }, err
	case msp.MethodTurnInterrupt, msp.MethodTurnCancel:
		res, err := mgr.StopTurn(ctx, method, params)
		return res, nil, err
	case msp.MethodTurnUnqueue:
		res, err := mgr.Unqueue(ctx, params)
		return res, nil, err
	case msp.MethodViewSubscribe:
		var p msp.ViewSubscribeParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, nil, msp.ErrInvalidParams("", "view/subscribe params: %v", err)
		}
		if err := c.roomToFollow(p.SessionID); err != nil {
			return nil, nil, err
		}
		head, attach, err := mgr.Subscribe(ctx, c, p.SessionID, p.After)
		if err != nil {
			return nil, nil, err
		}
		return msp.ViewCursorResult{ViewCursor: head}, attach, nil
	case msp.MethodViewUnsubscribe:
		var p msp.ViewUnsubscribeParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, nil, msp.ErrInvalidParams("", "view/unsubscribe params: %v", err)
		}
		// A session gone (erased while this connection attached, say)
		// holds nothing here any more either: its view must not keep a slot.
		err := mgr.Unsubscribe(ctx, c, p.SessionID)
		if me := (*msp.Error)(nil); err == nil || errors.As(err, &me) && me.Data.Kind == msp.KindSessionNotFound {
			c.out.forget(p.SessionID)
		}
		if err != nil {
			return nil, nil, err
		}
		return struct{}{}, nil, nil
	case msp.MethodViewPage:
		var p msp.ViewPageParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, nil, msp.ErrInvalidParams("", "view/page params: %v", err)
		}
		if p.Anchor != "" {
			// mspd's compactions shorten only what is sent to the model:
			// the view keeps every event, so no anchor has a boundary.
			e := msp.NewError(msp.CodeBoundaryPruned, msp.KindNoBoundary, "session has no %s boundary: this host's compactions shorten only what is sent to the model, and its view keeps every event; page by cursor", p.Anchor)
			e.Data.Anchor = p.Anchor
			e.Data.LatestBoundaryCursor = json.RawMessage("null")
			return nil, nil, e
		}
		res, err := mgr.Page(ctx, p)
		if err == nil && c.retryRendering() == retryAsStable {
			stablePage(&res)
		}
		return res, nil, err
	case msp.MethodItemReadOutput:
		res, err := mgr.ReadOutput(ctx, params)
		return res, nil, err
	case msp.MethodModelList:
		var p struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, nil, msp.ErrInvalidParams("", "model/list params: %v", err)
		}
		var providerID, modelID string
		if p.SessionID != "" {
			if providerID, modelID, err = mgr.SessionModel(ctx, p.SessionID); err != nil {
				return nil, nil, err
			}
		}
		if c.srv.cfg.Models == nil {
			return msp.ModelListResult{ProviderID: providerID, Source: "configCatalog", Models: []msp.ModelEntry{}}, nil, nil
		}
		return c.srv.cfg.Models.List(providerID, modelID), nil, nil
	}
	return nil, nil, msp.NewError(msp.CodeMethodNotFound, msp.KindMethodNotFound, "method %q is not served by this host", method)
}

// follows tells whether a method may have the connection follow one
// session more (see roomToFollow).
func follows(method string) bool {
	switch method {
	case msp.MethodSessionStart, msp.MethodSessionResume, msp.MethodSessionFork, msp.MethodViewSubscribe:
		return true
	}
	return false
}

// roomToFollow refuses a request that would have the connection follow
// one session more than Config.MaxSubscriptions, before it does anything:
// each session followed keeps view state here and the session in memory.
// Following again a session it follows (sessionID) takes no more room.
func (c *conn) roomToFollow(sessionID string) error {
	limit := c.srv.cfg.MaxSubscriptions
	if followed, n := c.out.follows(sessionID); followed || n < limit {
		return nil
	}
	e := msp.NewError(msp.CodeBackpressured, msp.KindBackpressured,
		"this connection follows %d sessions, the most it may at once: view/unsubscribe one of them first", limit)
	e.Data.Capacity = limit
	retry := false // not until the client unsubscribes
	e.Data.Retryable = &retry
	return e
}

// roomToMake is roomToFollow for a command that makes a session
// (session/start, or session/fork when fork is set: its sessionId names
// the source). A replay of one whose session the connection follows
// already takes no more room, so at the cap the ledger is asked which
// session the command made.
func (h *handler) roomToMake(ctx context.Context, params json.RawMessage, fork bool) error {
	ids := requestIDs(params)
	named := ids.SessionID
	if fork {
		named = ""
	}
	err := h.c.roomToFollow(named)
	if err == nil || ids.CommandID == "" {
		return err
	}
	if made := h.c.srv.mgr.RecordedSession(ctx, ids.CommandID); made != "" {
		if followed, _ := h.c.out.follows(made); followed {
			return nil
		}
	}
	return err
}

// mayNameServers refuses a session/start naming MCP servers
// (config.mcpServers) on a connection not granted sessionMcp.
func (c *conn) mayNameServers(params json.RawMessage) error {
	if c.sessionMCP.Load() {
		return nil
	}
	var p struct {
		Config struct {
			MCPServers map[string]json.RawMessage `json:"mcpServers"`
		} `json:"config"`
	}
	if json.Unmarshal(params, &p) == nil && len(p.Config.MCPServers) == 0 {
		return nil
	}
	how := "request the sessionMcp capability in initialize"
	if !c.srv.cfg.SessionMCP {
		how = "this server takes none (--session-mcp off)"
	}
	return msp.ErrCapabilityRequired(msp.CapabilitySessionMCP, "config.mcpServers needs the sessionMcp capability: %s", how)
}

// ids are the sessionId and commandId a request's params name.
type ids struct {
	SessionID string `json:"sessionId"`
	CommandID string `json:"commandId"`
}

// requestIDs reads the ids a request's params name, "" for those absent.
// The gate validated the params, so they decode.
func requestIDs(params json.RawMessage) ids {
	var p ids
	json.Unmarshal(params, &p)
	return p
}

func (h *handler) initialize(params json.RawMessage) (any, func(context.Context), error) {
	var p msp.InitializeParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "initialize params: %v", err)
	}
	c := h.c
	granted := []string{}
	retries, experimental := retryAsStable, false
	if p.Capabilities != nil {
		experimental = p.Capabilities.ExperimentalAPI
		if experimental {
			retries = retryAsModel
		}
		optOut := make(map[string]bool, len(p.Capabilities.OptOutNotificationMethods))
		for _, m := range p.Capabilities.OptOutNotificationMethods {
			optOut[m] = true
		}
		c.optOut.Store(&optOut)
		for _, capability := range p.Capabilities.RequestedCapabilities {
			switch capability {
			case CapabilitySessionListStream:
				c.listStream.Store(true)
			case CapabilityModelRetryScheduled:
				retries = retryAsModel
			case msp.CapabilitySessionMCP:
				if !c.srv.cfg.SessionMCP {
					continue // this server takes no MCP servers from clients
				}
				c.sessionMCP.Store(true)
			default:
				continue // unknown capabilities are not granted
			}
			granted = append(granted, capability)
		}
	}
	c.retries.Store(int32(retries))
	c.clientName.Store(&p.ClientInfo.Name)
	c.initialized.Store(true)
	c.log.Debug("initialized", "client", p.ClientInfo.Name, "version", p.ClientInfo.Version)
	cfg := &c.srv.cfg
	return msp.InitializeResult{
		ExperimentalAPI:     experimental,
		GrantedCapabilities: granted,
		MuseHome:            cfg.Home,
		PlatformFamily:      platformFamily(),
		PlatformOS:          platformOS(),
		Schema:              msp.SchemaInfo{Fingerprint: cfg.Fingerprint, Version: 1},
		ServerInfo:          msp.ServerInfo{Name: "mspd", Version: cfg.Version},
		SessionDurability:   "durable",
		UserAgent:           "mspd/" + cfg.Version + " (" + runtime.GOOS + "; " + runtime.GOARCH + ")",
		AIProviders:         &msp.AIProviders{CallAccounting: msp.CallAccounting{Attempts: true, RetryPolicy: true}},
	}, nil, nil
}

func platformFamily() string {
	if runtime.GOOS == "windows" {
		return "windows"
	}
	return "unix"
}

func platformOS() string {
	switch runtime.GOOS {
	case "darwin":
		return "macos"
	case "windows":
		return "windows"
	}
	return "linux"
}

// toMSPError renders any handler error as a typed MSP error: every error
// carries data.kind.
func toMSPError(err error) *msp.Error {
	var me *msp.Error
	if errors.As(err, &me) {
		return me
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		me = msp.NewError(msp.CodeOverloaded, msp.KindOverloaded, "request did not finish: %v", err)
		retry := true
		me.Data.Retryable = &retry
		return me
	}
	return msp.ErrInternal("%v", err)
}
