package tail

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"mspd/client"
	"mspd/schema/msp"
)

// Approvals (docs/tools.md): a tool call that waits for a person's consent
// shows as "? append (notes) needs approval {args}" when it is asked for,
// and how it was resolved as "✓ append approved once", "✗ append denied"…
// A run answers each approval/request the server presents with the
// receipt {} (an approval is shown at most once, from its approval/requested
// event, or from the request when the run attached after it). With Keys,
// a person at the terminal decides the oldest one shown: a approves once,
// s approves for the session, d denies.

// The keys that decide an approval, and the choices they make.
var decisionKeys = map[byte]string{
	'a': "approve",
	's': "approveForSession",
	'd': "deny",
}

// callNames is a tool call's tool and server, as its item names them.
type callNames struct{ tool, server string }

// noteCall remembers a toolCall item's names, for its approval's lines.
func (r *renderer) noteCall(it msp.Item) {
	if it.Kind == msp.ItemToolCall && it.Tool != "" {
		r.calls[it.ItemID] = callNames{it.Tool, it.Server}
	}
}

// approvalNames names the call an approval gates: from its item, or else
// from the model-facing name (server__tool).
func (r *renderer) approvalNames(itemID, toolName string) callNames {
	if n, ok := r.calls[itemID]; ok {
		return n
	}
	if server, tool, ok := strings.Cut(toolName, "__"); ok {
		return callNames{tool, server}
	}
	return callNames{toolName, ""}
}

// approvalAsked words an approval as it opens:
// `? append (notes) needs approval {"text":"a"}`.
func (r *renderer) approvalAsked(p msp.ApprovalRequestParams) string {
	n := r.approvalNames(p.ItemID, p.ToolName)
	line := r.paint(yellow, "? "+clip(oneLine(cmpOr(n.tool, "tool")), 60))
	if n.server != "" {
		line += " (" + oneLine(n.server) + ")"
	}
	line += r.paint(yellow, " needs approval")
	if p.RawArgs != "" {
		line += " " + clip(oneLine(p.RawArgs), callLineRunes)
	}
	return line
}

// approvalResolved words how an approval was resolved: "✓ append approved
// once", "✗ append denied", "✗ append: nobody approved it in time"…
func (r *renderer) approvalResolved(p msp.ApprovalResolvedParams) string {
	var toolName string
	if n, ok := r.calls[p.ItemID]; ok {
		toolName = n.tool
	}
	name := clip(oneLine(cmpOr(toolName, "the call")), 60)
	switch p.Decision {
	case msp.DecisionApproved:
		return r.paint(green, "✓ "+name+" approved once")
	case msp.DecisionApprovedForSession:
		return r.paint(green, "✓ "+name+" approved for this session")
	case msp.DecisionDenied:
		if p.ResolvedBy == msp.ResolvedByPolicy {
			return r.paint(red, "✗ "+name+" denied by the session's approval mode")
		}
		return r.paint(red, "✗ "+name+" denied")
	case msp.DecisionTimedOut:
		return r.paint(red, "✗ "+name+": nobody approved it in time")
	case msp.DecisionAbort:
		return r.paint(dim, "■ "+name+": not decided, the turn was stopped")
	}
	return r.paint(dim, "? "+name+" approval: "+oneLine(p.Decision))
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// presented shows an approval the server presents (approval/request)
// unless its approval/requested was shown already: a run that attached
// while it was pending saw no event of it. It reports whether the
// approval is shown (raw output shows none).
func (r *renderer) presented(params json.RawMessage, p msp.ApprovalRequestParams) bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.format == Raw {
		return false
	}
	if r.asked[p.ApprovalID] {
		return true
	}
	r.asked[p.ApprovalID] = true
	if r.format == JSON {
		line, _ := json.Marshal(struct {
			Cursor string          `json:"cursor,omitempty"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}{p.ViewCursor, msp.RequestApproval, params})
		r.s.println(string(line))
		return true
	}
	r.s.endLine()
	r.println(r.approvalAsked(p))
	return true
}

// request answers a server request on c: an approval of a session the run
// shows (f) gets its receipt and is shown; anything else is refused, and
// stays pending for another client.
func (t *tailer) request(ctx context.Context, c *client.Client, f *followed, n client.Notification) error {
	if n.Method != msp.RequestApproval {
		return refuseRequest(ctx, c, n.ID, msp.NewError(msp.CodeMethodNotFound, msp.KindMethodNotFound, "mspd tail does not answer %s", n.Method))
	}
	var p msp.ApprovalRequestParams
	if f == nil || n.Decode(&p) != nil || p.ApprovalID == "" || !f.r.presented(n.Params, p) {
		return refuseRequest(ctx, c, n.ID, msp.NewError(msp.CodeInternal, msp.KindInternal, "this mspd tail does not show approvals"))
	}
	if err := c.Respond(ctx, n.ID, msp.RequestReceipt{}); err != nil {
		return err
	}
	if t.dec != nil {
		t.dec.add(p, f)
	}
	return nil
}

// refuseRequest answers a server request with an error.
func refuseRequest(ctx context.Context, c *client.Client, id json.RawMessage, e *msp.Error) error {
	frame, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": e})
	if err != nil {
		return err
	}
	return c.SendRaw(ctx, frame)
}

// decider decides, by key press, the approvals a run shows: a queue of
// those presented and not resolved, oldest first; the keys decide its
// head, whose prompt stays at the bottom of a terminal (or is printed
// once, when the output is not one).
type decider struct {
	t    *tailer
	mu   sync.Mutex
	conn *client.Client // the connection now, nil while there is none
	// queue holds the approvals waiting, oldest first.
	queue []*waiting
	// done holds the approvals resolved, which a late request must not
	// queue again.
	done map[string]bool
	// decideTimeout bounds one approval/decide.
	decideTimeout time.Duration
}

// waiting is an approval presented and not yet resolved.
type waiting struct {
	req    msp.ApprovalRequestParams
	f      *followed
	prompt *promptLine // its live line, once it is the head on a terminal
	shown  bool        // its prompt was shown
	busy   bool        // a decision is on its way
}

func newDecider(t *tailer) *decider {
	return &decider{t: t, done: map[string]bool{}, decideTimeout: 10 * time.Second}
}

// connected sets the connection decisions go on (nil: none).
func (d *decider) connected(c *client.Client) {
	d.mu.Lock()
	d.conn = c
	d.mu.Unlock()
}

// add queues an approval presented, unless it is queued already (the
// server presents it again to each subscription).
func (d *decider) add(req msp.ApprovalRequestParams, f *followed) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done[req.ApprovalID] {
		return
	}
	for _, w := range d.queue {
		if w.req.ApprovalID == req.ApprovalID {
			return
		}
	}
	d.queue = append(d.queue, &waiting{req: req, f: f})
	d.promptHead()
}

// resolved takes a resolved approval off the queue; the next one's prompt
// shows.
func (d *decider) resolved(approvalID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done[approvalID] = true
	for i, w := range d.queue {
		if w.req.ApprovalID != approvalID {
			continue
		}
		d.queue = append(d.queue[:i], d.queue[i+1:]...)
		if w.prompt != nil {
			s := d.t.scr
			s.mu.Lock()
			s.removeLive(w.prompt)
			s.mu.Unlock()
		}
		d.promptHead()
		return
	}
}

// promptHead shows the head's prompt, once: a live line on a terminal,
// else a line. d.mu is held.
func (d *decider) promptHead() {
	if len(d.queue) == 0 || d.queue[0].shown {
		return
	}
	w := d.queue[0]
	w.shown = true
	s := d.t.scr
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term {
		w.prompt = &promptLine{r: w.f.r, req: w.req}
		s.addLive(w.prompt)
		return
	}
	s.endLine()
	w.f.r.println(w.f.r.promptText(w.req, 0))
}

// key handles one key press: a, s or d decides the oldest approval
// waiting, unless a decision of it is on its way (a key pressed twice
// decides once); other keys do nothing. The decision goes on its own
// goroutine, so that keys typed meanwhile are read, and dropped, rather
// than left to decide the next approval.
func (d *decider) key(ctx context.Context, b byte) {
	choice, ok := decisionKeys[b]
	if !ok {
		return
	}
	d.mu.Lock()
	if len(d.queue) == 0 {
		d.mu.Unlock()
		d.t.status("no approval waits: %c does nothing now", b)
		return
	}
	w, c := d.queue[0], d.conn
	if w.busy {
		d.mu.Unlock()
		d.t.status("the decision of approval %s is on its way: %c does nothing", short(w.req.ApprovalID), b)
		return
	}
	if c == nil {
		d.mu.Unlock()
		d.t.status("not connected: approval %s still waits; press %c again once reconnected", short(w.req.ApprovalID), b)
		return
	}
	w.busy = true
	d.mu.Unlock()
	go d.decide(ctx, c, w, choice)
}

// decide sends one decision; a refusal is said on the status output.
func (d *decider) decide(ctx context.Context, c *client.Client, w *waiting, choice string) {
	dctx, cancel := context.WithTimeout(ctx, d.decideTimeout)
	defer cancel()
	_, err := c.Decide(dctx, w.req, choice, "")
	d.mu.Lock()
	w.busy = false
	d.mu.Unlock()
	var me *msp.Error
	switch {
	case err == nil:
		// approval/resolved shows the outcome and takes it off the queue.
	case errors.As(err, &me) && me.Data.Kind == msp.KindApprovalAlreadyResolved:
		if res := me.Data.Resolution; res != nil {
			d.t.status("approval %s was decided already: %s by %s", short(w.req.ApprovalID), res.Decision, res.ResolvedBy)
		}
		d.resolved(w.req.ApprovalID)
	case errors.As(err, &me) && me.Data.Kind == msp.KindApprovalNotFound:
		d.t.status("approval %s: the server does not know it", short(w.req.ApprovalID))
		d.resolved(w.req.ApprovalID)
	case ctx.Err() != nil:
	default:
		d.t.status("could not decide approval %s (%v); it still waits", short(w.req.ApprovalID), err)
	}
}

// readKeys feeds the key presses read from keys to d until keys ends or
// ctx is done. Keys typed while no approval waits do nothing.
func (d *decider) readKeys(ctx context.Context, keys io.Reader) {
	buf := make([]byte, 64)
	for ctx.Err() == nil {
		n, err := keys.Read(buf)
		for _, b := range buf[:n] {
			d.key(ctx, b)
		}
		if err != nil {
			return
		}
	}
}

// promptText is the prompt of an approval waiting for a key, its name cut
// to leave the keys room in width columns (0: whole), without the label:
// "⏵ append (notes) waits: a approve once · s approve for this session ·
// d deny".
func (r *renderer) promptText(req msp.ApprovalRequestParams, width int) string {
	n := r.approvalNames(req.ItemID, req.ToolName)
	keys := " waits: a approve once · s approve for this session · d deny"
	name := oneLine(cmpOr(n.tool, "tool"))
	if n.server != "" {
		name += " (" + oneLine(n.server) + ")"
	}
	if width > 0 {
		room := width - 1 - utf8.RuneCountInString(r.prefixed("")) - utf8.RuneCountInString("⏵ "+keys)
		name = clip(name, max(room, 8))
	}
	return r.paint(yellow, "⏵ "+name+keys)
}

// promptLine is an approval's prompt kept at the bottom of a terminal
// until it is resolved.
type promptLine struct {
	r   *renderer
	req msp.ApprovalRequestParams
}

// text implements liveLine; the prompt does not change with time.
func (l *promptLine) text(time.Time) (string, bool) {
	return l.r.prefixed(l.r.promptText(l.req, l.r.s.width)), false
}
