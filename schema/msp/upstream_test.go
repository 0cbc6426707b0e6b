package msp

// The upstream MSP bundle lives outside the repository and must not be
// copied into it, so its shapes are kept as a digest in
// testdata/upstream-shapes.json. Regenerate the digest when upstream moves:

//go:generate go run ./internal/upstreamshapes ../../../shared/reference/msp-upstream.schema.json testdata/upstream-shapes.json

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"mspd/schema/msp/internal/upstreamshapes/shapes"
)

// upstreamBundle is where the upstream file sits in a full workspace.
var upstreamBundle = filepath.Join("..", "..", "..", "shared", "reference", "msp-upstream.schema.json")

// mspdOnlyDefs are the definitions mspd adds to MSP; upstream has none of them.
var mspdOnlyDefs = []string{
	"AIProviders", "CallAccounting", "RetryPolicy", "TurnAttempts", "TurnModelRetryScheduledParams",
	"TurnProviderSkippedParams", "ModelRef", "SessionListContentFilter", "SessionMatch",
}

// servedUpstreamDefs are the upstream definitions mspd sends or accepts; each
// must be in msp.schema.json with upstream's shape.
var servedUpstreamDefs = []string{
	// envelope and errors
	"Request", "Notification", "SuccessResponse", "ErrorResponse", "ErrorObject", "ErrorData", "ErrorKind",
	"RequestId", "JsonRpcVersion", "TraceContext",
	// handshake
	"InitializeParams", "InitializeResult", "ClientInfo", "ClientCapabilities", "SchemaInfo", "ServerInfo",
	"CapabilityName", "SessionDurability", "PlatformFamily", "PlatformOs",
	// sessions
	"Session", "SessionStatus", "ForkProvenance",
	"SessionStartParams", "SessionStartResult", "SessionStartedParams",
	"SessionResumeParams", "SessionResumeResult", "SessionReadParams", "SessionReadResult",
	"SessionHistory", "HistoryMode", "HistoryNoneReason", "HistoryPreference",
	"PendingRequestPointer", "PendingRequestKind", "ViewSnapshot",
	"SessionListParams", "SessionListResult", "SessionListFilter", "SessionListTextFilter", "SessionListTextField",
	"SessionListSessionIdFilter", "SessionListBranchFilter",
	"SessionConfig", "SessionMcpServerConfig", "SessionMcpServerMode", "SessionMcpStdioFraming",
	// turns
	"TurnStartParams", "TurnStartResult", "TurnInputPart", "TurnInputPartType", "IfBusy", "ReasoningEffort",
	"TurnStartDisposition", "CommandStatus",
	"TurnInterruptParams", "TurnInterruptResult", "TurnCancelParams", "TurnCancelResult",
	"TurnUnqueueParams", "TurnUnqueueResult",
	"TurnStartedParams", "TurnCompletedParams", "TurnTerminal", "TurnError", "TurnErrorKind",
	"TurnUnqueuedParams", "TurnRetryScheduledParams",
	// items, usage, provenance
	"ItemStartedParams", "ItemDeltaParams", "ItemCompletedParams", "Item", "ItemKind", "ItemStatus", "MessageAttachment",
	"SessionTokenUsageParams", "TokenUsage", "CumulativeTokenUsage", "CumulativeCost",
	// compaction and the context window
	"SessionCompactParams", "SessionCompactResult", "CompactStatus", "CompactionOutcome", "CompactionTrigger",
	"SessionContextUsageParams", "ContextPressureLevel", "ContextUsage",
	"SourceRange", "RecordPosition", "StreamRef",
	"OutputRef", "OutputRefAvailability", "ItemReadOutputParams", "ItemReadOutputResult", "ItemReadOutputEncoding",
	// views
	"ViewSubscribeParams", "ViewSubscribeResult", "ViewUnsubscribeParams", "ViewUnsubscribeResult",
	"ViewPageParams", "ViewPageResult", "ViewPageAnchor", "ViewPageDirection",
	"UnframedViewNotification", "UnframedViewNotificationParams", "ViewGapParams",
	// models
	"ModelListParams", "ModelListResult", "ModelCatalogEntry", "ModelCatalogSource", "ModelCost",
	// approvals
	"ApprovalMode", "ApprovalModeSource", "ApprovalModeApplyOutcome", "EffectiveApprovalModeState",
	"SessionSetApprovalModeParams", "SessionSetApprovalModeResult", "SessionApprovalModeChangedParams",
	"ApprovalRequestParams", "ApprovalChoice", "ApprovalChoiceScope", "ApprovalDecision", "ApprovalRequirementRef",
	"ApprovalSubject", "ApprovalDecideParams", "ApprovalDecideResult", "ApprovalResolvedParams", "ApprovalResolvedBy",
	"ApprovalPolicyResult", "ApprovalStageEvidence", "ApprovalStageResolution", "ApprovalResolutionSummary",
	"ApprovalListPendingParams", "ApprovalListPendingResult", "UserInputRequestParams", "RequestReceipt",
	// reasoning
	"ReasoningEffortState", "ReasoningEffortChangeSource", "SessionSetReasoningEffortParams",
	"SessionSetReasoningEffortResult", "SessionReasoningEffortChangedParams",
}

func loadDigests(t *testing.T) (ours, upstream *shapes.Digest) {
	t.Helper()
	ours, err := shapes.FromBundle(SchemaJSON())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/upstream-shapes.json")
	if err != nil {
		t.Fatal(err)
	}
	upstream = new(shapes.Digest)
	if err := json.Unmarshal(b, upstream); err != nil {
		t.Fatal(err)
	}
	return ours, upstream
}

// TestUpstreamDigestCurrent regenerates the digest in memory when the
// upstream bundle is at hand and compares it with the committed one, so a
// stale testdata/upstream-shapes.json is noticed. Without the bundle the
// committed digest is trusted.
func TestUpstreamDigestCurrent(t *testing.T) {
	bundle, err := os.ReadFile(upstreamBundle)
	if err != nil {
		t.Logf("%s not available; using the committed digest as is", upstreamBundle)
		return
	}
	fresh, err := shapes.FromBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	_, committed := loadDigests(t)
	a, _ := json.Marshal(fresh)
	b, _ := json.Marshal(committed)
	if string(a) != string(b) {
		t.Fatal("testdata/upstream-shapes.json is stale; run go generate ./schema/msp")
	}
}

// TestSharedDefsAgreeWithUpstream checks every definition both schemas
// have: same kind, same required set, and the same type for every property
// both define. Enums keep upstream's openness; a closed enum keeps upstream's
// values exactly and an open one lists at least upstream's.
func TestSharedDefsAgreeWithUpstream(t *testing.T) {
	ours, upstream := loadDigests(t)
	shared := 0
	for name, o := range ours.Defs {
		u, ok := upstream.Defs[name]
		if !ok {
			continue
		}
		shared++
		if o.Kind != u.Kind {
			t.Errorf("%s: kind %s, upstream %s", name, o.Kind, u.Kind)
			continue
		}
		switch o.Kind {
		case "object":
			if !slices.Equal(o.Required, u.Required) {
				t.Errorf("%s: required %q, upstream %q", name, o.Required, u.Required)
			}
			for prop, typ := range o.Properties {
				if ut, ok := u.Properties[prop]; ok && ut != typ {
					t.Errorf("%s.%s: type %s, upstream %s", name, prop, typ, ut)
				}
			}
		case "enum":
			if o.Openness != u.Openness {
				t.Errorf("%s: openness %s, upstream %s", name, o.Openness, u.Openness)
			}
			if o.Openness == "closed" && !slices.Equal(sorted(o.Values), sorted(u.Values)) {
				t.Errorf("%s: closed values %q, upstream %q", name, o.Values, u.Values)
			}
			for _, v := range u.Values {
				if !slices.Contains(o.Values, v) {
					t.Errorf("%s: upstream value %q not listed", name, v)
				}
			}
		default:
			if o.Type != u.Type {
				t.Errorf("%s: type %s, upstream %s", name, o.Type, u.Type)
			}
		}
	}
	t.Logf("%d definitions shared with upstream", shared)
}

func TestServedDefsPresent(t *testing.T) {
	ours, upstream := loadDigests(t)
	for _, name := range servedUpstreamDefs {
		if _, ok := upstream.Defs[name]; !ok {
			t.Errorf("%s is listed as upstream but upstream has no such definition", name)
		}
		if _, ok := ours.Defs[name]; !ok {
			t.Errorf("%s is served by mspd but missing from msp.schema.json", name)
		}
	}
	for _, name := range mspdOnlyDefs {
		if _, ok := ours.Defs[name]; !ok {
			t.Errorf("mspd addition %s missing from msp.schema.json", name)
		}
		if _, ok := upstream.Defs[name]; ok {
			t.Errorf("%s is now defined upstream; compare the shapes and drop it from mspdOnlyDefs", name)
		}
	}
	// Every definition of ours is either upstream's or a known addition, so
	// a typo in a name cannot pass as a new type.
	for name := range ours.Defs {
		if _, ok := upstream.Defs[name]; !ok && !slices.Contains(mspdOnlyDefs, name) {
			t.Errorf("%s is neither an upstream definition nor a listed mspd addition", name)
		}
	}
}

// TestMethodRefsAgreeWithUpstream checks that shared methods and
// notifications use the same definitions as upstream, and that the only
// methods mspd adds are turn/modelRetryScheduled and turn/providerSkipped.
func TestMethodRefsAgreeWithUpstream(t *testing.T) {
	ours, upstream := loadDigests(t)
	for _, set := range []struct {
		name           string
		ours, upstream map[string]shapes.MethodRefs
		mspdOnly       []string
	}{
		{"methods", ours.Methods, upstream.Methods, nil},
		{"requests", ours.Requests, upstream.Requests, nil},
		{"notifications", ours.Notifications, upstream.Notifications, []string{NotifyTurnModelRetryScheduled, NotifyTurnProviderSkipped}},
	} {
		for method, refs := range set.ours {
			up, ok := set.upstream[method]
			if !ok {
				if !slices.Contains(set.mspdOnly, method) {
					t.Errorf("%s %q is not upstream", set.name, method)
				}
				continue
			}
			if refs != up {
				t.Errorf("%s %q: %+v, upstream %+v", set.name, method, refs, up)
			}
		}
	}
	if got := ours.Notifications[NotifyTurnModelRetryScheduled]; got != (shapes.MethodRefs{Params: "ref:TurnModelRetryScheduledParams"}) {
		t.Errorf("turn/modelRetryScheduled refs %+v", got)
	}
}

// TestErrorsAgreeWithUpstream checks the error registry: every entry of
// ours is upstream's (override kinds may be a subset), and every code and
// kind constant in errors.go is registered.
func TestErrorsAgreeWithUpstream(t *testing.T) {
	ours, upstream := loadDigests(t)
	byCode := map[int]shapes.ErrorEntry{}
	for _, e := range upstream.Errors {
		byCode[e.Code] = e
	}
	registered := map[int]shapes.ErrorEntry{}
	for _, e := range ours.Errors {
		registered[e.Code] = e
		u, ok := byCode[e.Code]
		switch {
		case !ok:
			t.Errorf("error %d is not in the upstream registry", e.Code)
		case e.Kind != u.Kind || (e.Retryable == nil) != (u.Retryable == nil) || (e.Retryable != nil && *e.Retryable != *u.Retryable):
			t.Errorf("error %d: %+v, upstream %+v", e.Code, e, u)
		}
		for _, k := range e.OverrideKinds {
			if !slices.Contains(u.OverrideKinds, k) {
				t.Errorf("error %d: override kind %q is not upstream's", e.Code, k)
			}
		}
	}
	kinds := ours.Defs["ErrorKind"].Values
	for code, kind := range map[int]string{
		CodeParseError: KindParseError, CodeInvalidRequest: KindInvalidRequest, CodeMethodNotFound: KindMethodNotFound,
		CodeInvalidParams: KindInvalidParams, CodeInternal: KindInternal, CodeOverloaded: KindOverloaded,
		CodeInputTooLarge: KindInputTooLarge, CodeNotFound: KindNotFound, CodeSessionNotFound: KindSessionNotFound,
		CodeSessionNotLoaded: KindSessionNotLoaded, CodeCommandRejected: KindCommandRejected,
		CodeBackpressured: KindBackpressured, CodeBoundaryPruned: KindBoundaryPruned,
		CodeApprovalNotFound: KindApprovalNotFound, CodeApprovalAlreadyResolved: KindApprovalAlreadyResolved,
		CodeApprovalChoiceInvalid: KindApprovalChoiceInvalid, CodeApprovalRequirementStale: KindApprovalRequirementStale,
		CodeCapabilityRequired: KindCapabilityRequired, CodeOutputUnavailable: KindOutputUnavailable,
	} {
		if registered[code].Kind != kind {
			t.Errorf("errors.go code %d (%s) is registered as %+v", code, kind, registered[code])
		}
		if !slices.Contains(kinds, kind) {
			t.Errorf("ErrorKind does not list %q", kind)
		}
	}
	for _, k := range []string{KindNotInitialized, KindAlreadyInitialized} {
		if !slices.Contains(registered[CodeInvalidRequest].OverrideKinds, k) || !slices.Contains(kinds, k) {
			t.Errorf("override kind %q of invalidRequest is not registered", k)
		}
	}
}

// TestModelRetryScheduledShape pins mspd's own notice: exactly the eight
// required members of turn/retryScheduled minus reason, plus the optional
// system, errorKind and httpStatus, the optional fallback members, and no
// reason at all.
func TestModelRetryScheduledShape(t *testing.T) {
	ours, upstream := loadDigests(t)
	d := ours.Defs["TurnModelRetryScheduledParams"]
	want := []string{"attempt", "maxAttempts", "nextAttempt", "retryDelayMs", "sessionId", "sourceRange", "turnId", "viewCursor"}
	if !slices.Equal(d.Required, want) {
		t.Errorf("required %q, want %q", d.Required, want)
	}
	if _, ok := d.Properties["reason"]; ok {
		t.Error("TurnModelRetryScheduledParams defines reason")
	}
	wantTypes := map[string]string{
		"attempt": "integer", "maxAttempts": "integer", "nextAttempt": "integer", "retryDelayMs": "integer",
		"sessionId": "string", "sourceRange": "ref:SourceRange", "turnId": "string", "viewCursor": "string",
		"system": "string", "errorKind": "string", "httpStatus": "integer",
		"fallback": "boolean", "providerId": "string", "nextProviderId": "string", "nextModelId": "string", "fallbackReason": "string",
	}
	if len(d.Properties) != len(wantTypes) {
		t.Errorf("properties %v, want %v", d.Properties, wantTypes)
	}
	for p, typ := range wantTypes {
		if d.Properties[p] != typ {
			t.Errorf("%s: type %q, want %q", p, d.Properties[p], typ)
		}
	}
	// The shared members mirror upstream's turn/retryScheduled exactly.
	up := upstream.Defs["TurnRetryScheduledParams"]
	for _, p := range want {
		if up.Properties[p] != d.Properties[p] || !slices.Contains(up.Required, p) {
			t.Errorf("%s differs from upstream TurnRetryScheduledParams", p)
		}
	}

	v := newTestValidator(t)
	notice := `{"sessionId":"s","viewCursor":"v:s:5","sourceRange":` + testSR + `,"turnId":"t","attempt":1,"nextAttempt":2,"maxAttempts":3,"retryDelayMs":2000}`
	if errs := v.Params(NotifyTurnModelRetryScheduled, json.RawMessage(notice)); errs != nil {
		t.Errorf("minimal notice: %v", errs)
	}
}

func ptr[T any](v T) *T { return &v }

// TestGoTypesMatchSchema marshals representative values of the Go wire
// types and validates them against their definitions, so types.go and
// msp.schema.json cannot drift apart unnoticed.
func TestGoTypesMatchSchema(t *testing.T) {
	v := newTestValidator(t)
	sr := &SourceRange{
		First:  RecordPosition{ID: "0198f0aa-1111-7000-8000-0000000000e1", Sequence: 7},
		Last:   RecordPosition{ID: "0198f0aa-1111-7000-8000-0000000000e1", Sequence: 7},
		Stream: StreamRef{ID: testSession, Kind: "session"},
	}
	durable := ViewHeader{SessionID: testSession, SourceRange: sr, ViewCursor: "v:" + testSession + ":7"}
	idle := Session{
		CreatedAt: "2026-08-07T18:02:11Z", UpdatedAt: "2026-08-07T18:02:11Z",
		Path: "/var/lib/mspd/sessions/" + testSession, SessionID: testSession, Status: SessionIdle,
	}
	running := idle
	running.ActiveTurnID = ptr(testCommand)
	running.ModelID = ptr("gpt-test")
	running.ProviderID = ptr("openai")
	running.WorkspaceRoot = ptr("/home/me/src")
	running.Status = SessionRunning
	running.TurnCount = 3
	running.FirstUserPrompt = "hello"
	running.Name = "chat"
	running.LastActivityAt = "2026-08-07T18:05:00Z"
	agent := Item{ItemID: "0198f0ac-4242-7000-8000-000000000042", Kind: ItemAgentMessage, Revision: 1,
		Status: ItemInProgress, TurnID: ptr(testCommand), Text: ptr("")}
	user := Item{ItemID: "0198f0ac-0001-7000-8000-000000000001", Kind: ItemUserMessage, Revision: 1,
		Status: ItemCompleted, TurnID: ptr(testCommand), Text: ptr("hi"), CommandID: testCommand,
		DisplayText: "hi", RecordedAt: "2026-08-07T18:02:12Z"}
	withImage := user
	withImage.Attachments = []MessageAttachment{{Type: AttachmentImage, MediaType: "image/png", Width: ptr(2), Height: ptr(2),
		OutputRef: &OutputRef{Availability: OutputAvailable, ByteLen: 70, Digest: "sha256:00", ID: "img-3-1", Kind: OutputKindImage,
			MediaType: "image/png", URI: "mspd:image/img-3-1"}}}
	usage := TokenUsage{CachedTokens: 10, InputTokens: 100, OutputTokens: 20, ReasoningTokens: 5}
	snapshot := SessionSnapshot{
		History:         SessionHistory{Items: []Item{user, agent}, Mode: HistoryInline},
		PendingRequests: []PendingRequest{},
		Session:         idle,
		ViewCursor:      "v:" + testSession + ":9",
	}
	configured := snapshot
	configured.Config = &SessionConfig{Instructions: "Be terse."}
	excluded := snapshot
	excluded.History = SessionHistory{Mode: HistoryNone, NoneReason: NoneExcluded}
	stop := TurnStopParams{CommandID: testCommand, SessionID: testSession, TurnID: testCommand}
	ack := CommandAck{CommandID: testCommand, Status: StatusAccepted, TurnID: testCommand}
	withMode := running
	withMode.ApprovalMode = &EffectiveApprovalModeState{Mode: ApprovalPromptUnmatched, Source: ApprovalSourceStartup}
	request := ApprovalRequestParams{ViewHeader: durable, ApprovalID: "a1", ItemID: "i1", TaskID: "i1", ToolCallID: "c1",
		ToolName: "files__write", RawArgs: `{"path":"a"}`, TurnID: testCommand,
		Subject:              ApprovalSubject{Kind: SubjectTool, ToolName: "files__write"},
		CurrentRequirementID: ApprovalRequirementRef{ApprovalID: "a1"},
		AvailableChoices: []ApprovalChoice{{ChoiceID: "approve", Decision: DecisionApproved, Label: "Approve", Scope: ScopeOnce},
			{ChoiceID: "deny", Decision: DecisionDenied, Label: "Deny", Scope: ScopeOnce, AcceptsFeedback: true}}}
	pending := snapshot
	pending.PendingRequests = []PendingRequest{{ApprovalID: "a1", Kind: PendingApproval, ViewCursor: "v:x:7"}}
	rpe := &Error{Code: CodeBoundaryPruned, Message: "no boundary", Data: ErrorData{Kind: KindNoBoundary, SessionID: testSession, Anchor: "latestCompaction", LatestBoundaryCursor: json.RawMessage("null"), Retryable: ptr(false)}}

	tests := []struct {
		def   string
		value any
	}{
		{"InitializeParams", InitializeParams{ClientInfo: ClientInfo{Name: "mspd_client", Version: "1"},
			Capabilities: &ClientCapabilities{OptOutNotificationMethods: []string{NotifyItemDelta}, UserInputDialogs: ptr(false)}}},
		{"InitializeResult", InitializeResult{GrantedCapabilities: []string{}, MuseHome: "/var/lib/mspd",
			PlatformFamily: "unix", PlatformOS: "linux", Schema: SchemaInfo{Fingerprint: Fingerprint(), Version: 1},
			ServerInfo: ServerInfo{Name: "mspd", Version: "0.1.0"}, SessionDurability: "durable", UserAgent: "mspd/0.1.0",
			AIProviders: &AIProviders{CallAccounting: CallAccounting{Attempts: true, RetryPolicy: true}}}},
		{"Session", idle},
		{"Session", running},
		{"SessionStartParams", SessionStartParams{CommandID: testCommand, WorkspaceRoot: "/w", ProviderID: ptr("openai")}},
		{"SessionStartParams", SessionStartParams{CommandID: testCommand, Config: &SessionConfig{MCPServers: map[string]SessionMCPServerConfig{
			"web":   {Transport: MCPTransportStreamableHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer x"}, Mode: MCPModeOptional},
			"local": {Transport: MCPTransportStdio, Command: "mcp-server", Args: []string{"--flag"}, Env: map[string]string{"K": "v"}, Framing: MCPFramingAuto},
		}}}},
		{"SessionResumeParams", SessionResumeParams{CommandID: testCommand, SessionID: testSession, Config: &SessionConfig{}}},
		{"ItemCompletedParams", ItemParams{ViewHeader: durable, Item: Item{ItemID: "0198f0ac-0002-7000-8000-000000000002", Kind: ItemToolCall,
			Revision: 2, Status: ItemCompleted, TurnID: ptr(testCommand), Tool: "big", Server: "t", CallID: "c1", Args: ptr("{}"),
			VisibleOutput: ptr("xx"), Truncated: true, OutputRef: &OutputRef{Availability: OutputAvailable, ByteLen: 100000, Digest: "sha256:00",
				ID: "o1", Kind: OutputKindTool, MediaType: MediaTypeText, URI: "mspd:output/o1", Truncated: true}}}},
		{"ItemReadOutputParams", ItemReadOutputParams{SessionID: testSession, ItemID: "i", OutputRef: "o1", OffsetBytes: ptr[int64](0), LengthBytes: ptr[int64](10)}},
		{"ItemReadOutputResult", ItemReadOutputResult{ByteLen: 2, Content: "xx", Encoding: EncodingUTF8, EOF: true, MediaType: MediaTypeText, OffsetBytes: 99998}},
		{"SessionStartResult", SessionStartResult{Session: idle, ViewCursor: "v:" + testSession + ":1"}},
		{"SessionStartedParams", SessionStartedParams{Session: idle}},
		{"SessionResumeParams", SessionResumeParams{CommandID: testCommand, SessionID: testSession, Cursor: ptr("v:x:1"), History: "inline"}},
		{"SessionResumeResult", snapshot},
		{"SessionReadParams", SessionReadParams{SessionID: testSession, ExcludeItems: ptr(true)}},
		{"SessionReadResult", excluded},
		{"SessionListParams", SessionListParams{Limit: ptr(50)}},
		{"SessionListResult", SessionListResult{Sessions: []Session{running, idle}, NextCursor: ptr("p2")}},
		{"SessionListResult", SessionListResult{Sessions: []Session{}}},
		{"TurnStartParams", TurnStartParams{CommandID: testCommand, SessionID: testSession,
			Input:  []TurnInputPart{{Type: "text", Text: "hi"}, {Type: "image", Base64Data: "AA==", MediaType: "image/png", Width: ptr(1), Height: ptr(1)}},
			IfBusy: IfBusyQueue, ReasoningEffort: "low", Retry: &RetryPolicy{MaxAttempts: ptr(3), GrowMaxTokens: ptr(true)},
			MaxTokens: ptr(1024), ResponseSchema: json.RawMessage(`{"type":"object"}`)}},
		{"TurnStartResult", TurnStartResult{CommandID: testCommand, Disposition: DispositionStarted, StartedNewTurn: true, Status: StatusAccepted, TurnID: testCommand}},
		{"TurnInterruptParams", stop},
		{"TurnCancelParams", stop},
		{"TurnUnqueueParams", stop},
		{"TurnInterruptResult", ack},
		{"TurnCancelResult", ack},
		{"TurnUnqueueResult", ack},
		{"TurnStartedParams", TurnStartedParams{ViewHeader: durable, CommandID: testCommand, TurnID: testCommand}},
		{"TurnUnqueuedParams", TurnUnqueuedParams{ViewHeader: durable, CommandID: testCommand, TurnID: testCommand}},
		{"TurnCompletedParams", TurnCompletedParams{ViewHeader: durable, TurnID: testCommand, Terminal: TerminalCompleted,
			DurationMs: ptr[int64](1200), TimeToFirstTokenMs: ptr[int64](300), Usage: &usage,
			Attempts: &Attempts{Count: 2, OutputTokens: 40, UsageComplete: true, StructuredOutput: "native"}}},
		{"TurnCompletedParams", TurnCompletedParams{ViewHeader: durable, TurnID: testCommand, Terminal: TerminalFailed,
			Error: &TurnError{Kind: TurnErrorHostRestarted, Message: "server restarted", Retryable: true}, Reason: "server restarted",
			Attempts: &Attempts{Count: 0, OutputTokens: 0, UsageComplete: false}}},
		{"TurnRetryScheduledParams", TurnRetryScheduledParams{ViewHeader: durable, TurnID: testCommand, Attempt: 2, NextAttempt: 3,
			MaxAttempts: 3, RetryDelayMs: 1500, Reason: "provider stream disconnected"}},
		{"TurnModelRetryScheduledParams", TurnModelRetryScheduledParams{ViewHeader: durable, TurnID: testCommand, Attempt: 1,
			NextAttempt: 2, MaxAttempts: 3, RetryDelayMs: 800, System: "openai", ErrorKind: "serverError", HTTPStatus: 500}},
		{"TurnModelRetryScheduledParams", TurnModelRetryScheduledParams{ViewHeader: durable, TurnID: testCommand, Attempt: 1,
			NextAttempt: 2, MaxAttempts: 2, RetryDelayMs: 0}},
		{"ItemStartedParams", ItemParams{ViewHeader: ViewHeader{SessionID: testSession, ViewCursor: "v:x:8"}, Item: agent}},
		{"ItemCompletedParams", ItemParams{ViewHeader: durable, Item: user}},
		{"ItemDeltaParams", ItemDeltaParams{SessionID: testSession, ViewCursor: "v:x:8.1", ItemID: agent.ItemID, Field: "text", Delta: "Hel"}},
		{"ViewGapParams", ViewGapParams{SessionID: testSession, After: "v:x:3", Next: "v:x:9"}},
		{"SessionTokenUsageParams", SessionTokenUsageParams{ViewHeader: durable, TurnID: testCommand,
			Cumulative: CumulativeTokenUsage{OutputTokens: 20, PromptTokens: 90, TotalTokens: 110}, PromptTokens: 90,
			TotalTokens: 110, Usage: usage, DurationMs: ptr[int64](900), FinishReason: "stop", ModelID: "gpt-test"}},
		{"SessionTokenUsageParams", SessionTokenUsageParams{ViewHeader: durable, TurnID: testCommand,
			Cumulative:   CumulativeTokenUsage{OutputTokens: 20, PromptTokens: 90, TotalTokens: 110, Cost: &CumulativeCost{USD: 0.0125, Partial: true}},
			PromptTokens: 90, TotalTokens: 110, Usage: usage, ModelID: "gpt-test", CostUSD: ptr(0.0025)}},
		{"ViewSubscribeParams", ViewSubscribeParams{SessionID: testSession, After: ptr("v:x:2")}},
		{"ViewSubscribeResult", ViewCursorResult{ViewCursor: "v:x:9"}},
		{"ViewUnsubscribeParams", ViewUnsubscribeParams{SessionID: testSession}},
		{"ViewUnsubscribeResult", struct{}{}},
		{"ViewPageParams", ViewPageParams{SessionID: testSession, Cursor: ptr("v:x:2"), Direction: Backward, Limit: 100}},
		{"ViewPageResult", ViewPageResult{Events: []ViewEvent{{Method: NotifyTurnStarted,
			Params: mustJSON(t, TurnStartedParams{ViewHeader: durable, CommandID: testCommand, TurnID: testCommand})}}, NextCursor: ptr("v:x:7")}},
		{"ViewPageResult", ViewPageResult{Events: []ViewEvent{}}},
		{"ModelListResult", ModelListResult{ProviderID: "openai", Source: "configCatalog", Models: []ModelEntry{
			{DisplayLabel: "GPT Test", IsActive: true, IsDefault: true, ModelID: "gpt-test", ProviderID: "openai", ContextLimit: ptr[int64](128000)},
			{DisplayLabel: "Other", ModelID: "other", ProviderID: "openai", Description: ptr("cheap"), ReleaseDate: ptr("2025-01-01"),
				Cost: &ModelCost{Cached: "0.1", Currency: ptr("USD"), Input: "1", Output: "4"}},
		}}},
		{"Session", withMode},
		{"SessionStartParams", SessionStartParams{CommandID: testCommand, ApprovalMode: ptr(ApprovalDenyUnmatched)}},
		{"SessionResumeResult", pending},
		{"SessionSetApprovalModeParams", SessionSetApprovalModeParams{CommandID: testCommand, Mode: ApprovalAllowAll, SessionID: testSession}},
		{"SessionSetApprovalModeResult", SessionSetApprovalModeResult{ApplyOutcome: ApplyCompleted, CommandID: testCommand, Status: StatusAccepted,
			EffectiveMode: EffectiveApprovalModeState{LastCommandID: ptr(testCommand), Mode: ApprovalAllowAll, Source: ApprovalSourceReconfigure}}},
		{"SessionApprovalModeChangedParams", SessionApprovalModeChangedParams{ViewHeader: durable, ClientName: "mspd_client",
			CommandID: testCommand, Mode: ApprovalAllowAll, Source: ApprovalSourceReconfigure}},
		{"ApprovalRequestParams", request},
		{"ApprovalDecideParams", ApprovalDecideParams{ApprovalID: "a1", ChoiceID: "deny", CommandID: testCommand, Feedback: ptr("use the other file"),
			RequirementID: ApprovalRequirementRef{ApprovalID: "a1"}, SessionID: testSession}},
		{"ApprovalDecideResult", ApprovalDecideResult{ApprovalID: "a1", CommandID: testCommand, Status: StatusAccepted, Terminal: true}},
		{"ApprovalResolvedParams", ApprovalResolvedParams{ViewHeader: durable, ApprovalID: "a1", DecidedByCommandID: testCommand,
			Decision: DecisionDenied, ItemID: "i1", PolicyResult: PolicyDeny, ResolvedBy: ResolvedByUser, StageEvidence: []ApprovalStageEvidence{}, TurnID: testCommand}},
		{"ApprovalListPendingParams", ApprovalListPendingParams{SessionID: testSession}},
		{"ApprovalListPendingResult", ApprovalListPendingResult{Approvals: []json.RawMessage{mustJSON(t, request)}, UserInputs: []json.RawMessage{}}},
		{"RequestReceipt", RequestReceipt{}},
		{"ErrorObject", ErrApprovalNotFound(testSession, "a1")},
		{"ErrorObject", ErrApprovalAlreadyResolved(testSession, "a1", ApprovalResolutionSummary{Decision: DecisionApproved, ResolvedBy: ResolvedByUser, ViewCursor: "v:x:9"})},
		{"ErrorObject", ErrApprovalChoiceInvalid(testSession, "a1", "maybe")},
		{"ErrorObject", ErrApprovalRequirementStale(testSession, ApprovalRequirementRef{ApprovalID: "a1"})},
		{"ErrorObject", rpe},
		{"ErrorObject", ErrInvalidParams("retry.maxAttempts", "must be >= 1")},
		{"ErrorObject", ErrCommandRejected(testCommand, ReasonCommandIDConflict, "conflict")},
		{"ErrorObject", ErrMissingAnchor(testSession, "v:x:1")},
		{"ErrorObject", ErrSessionNotFound(testSession)},
		{"ErrorObject", ErrInternal("boom")},
		{"ErrorObject", ErrCapabilityRequired("sessionMcp", "needs sessionMcp")},
		{"ErrorObject", &Error{Code: CodeOutputUnavailable, Message: "no output", Data: ErrorData{Kind: KindOutputUnavailable, ItemID: "i", OutputRef: "o", Availability: OutputMissing}}},
		{"ErrorObject", &Error{Code: CodeInvalidParams, Message: "misaligned", Data: ErrorData{Kind: KindInvalidParams, ItemID: "i", OutputRef: "o", AlignedNextOffset: ptr[int64](3), Reason: ReasonMisalignedOffset}}},
		{"ItemCompletedParams", ItemParams{ViewHeader: durable, Item: withImage}},
		{"ItemReadOutputResult", ItemReadOutputResult{ByteLen: 3, Content: "iVBO", Encoding: EncodingBase64, EOF: false, MediaType: "image/png", OffsetBytes: 0}},
		{"SessionStartParams", SessionStartParams{CommandID: testCommand, Config: &SessionConfig{Instructions: "Be terse."}}},
		{"SessionReadResult", configured},
		{"SessionResumeResult", configured},
		{"SessionForkResult", configured},
	}
	for _, tt := range tests {
		b := mustJSON(t, tt.value)
		if errs := v.Def(tt.def, b); errs != nil {
			t.Errorf("%s from %T: %v\n%s", tt.def, tt.value, errs, b)
		}
	}

	// A whole error response built from a typed error passes the frame
	// checker, data.kind included.
	frame := mustJSON(t, map[string]any{"jsonrpc": JSONRPCVersion, "id": 4, "error": rpe})
	if errs := v.NewFrameChecker().Check(frame); errs != nil {
		t.Errorf("error response frame: %v\n%s", errs, frame)
	}
}

// TestGoTypeHazards documents zero values of the Go types that do not
// validate, so callers know what they must fill in: nil slices marshal as
// null where the schema wants an array.
func TestGoTypeHazards(t *testing.T) {
	v := newTestValidator(t)
	for _, tt := range []struct {
		def   string
		value any
		field string
	}{
		{"SessionResumeResult", SessionSnapshot{History: SessionHistory{Mode: HistoryNone}, ViewCursor: "v"}, "pendingRequests"},
		{"SessionListResult", SessionListResult{}, "sessions"},
		{"ViewPageResult", ViewPageResult{}, "events"},
		{"InitializeResult", InitializeResult{}, "grantedCapabilities"},
	} {
		errs := v.Def(tt.def, mustJSON(t, tt.value))
		if !slices.Contains(fields(errs), tt.field) {
			t.Errorf("%s zero value: expected an error at %q, got %v", tt.def, tt.field, errs)
		}
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}
