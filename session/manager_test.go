package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// histModel is a provider.Model that records the history of every request
// and answers by the turn's text:
//
//	"fail…"   401 before any output
//	"cut…"    attempt 1 streams "partial" and is cut; later attempts answer
//	"block…"  streams "working", then waits for cancellation
//	"crash…"  the same on attempt 1; later attempts answer
//	"empty"   a successful empty answer
//	otherwise "re: <text>"
//
// A request with a responseSchema gets invalid JSON on attempt 1 and
// {"answer": 4} afterwards. Every answer reports 10 input and 5 output
// tokens.
type histModel struct {
	mu      sync.Mutex
	reqs    [][]provider.Message
	started chan string // the text of each "block" request, once it streams
}

func newHistModel() *histModel { return &histModel{started: make(chan string, 16)} }

func (m *histModel) System() string { return "hist" }

func (m *histModel) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, slices.Clone(req.Messages))
	m.mu.Unlock()
	text := req.Messages[len(req.Messages)-1].Text
	done := provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 10, OutputTokens: 5}}
	switch {
	case len(req.ResponseSchema) > 0:
		if req.Attempt == 1 {
			onText(`{"answer": 4`)
		} else {
			onText(`{"answer": 4}`)
		}
		return done, nil
	case strings.HasPrefix(text, "fail"):
		return provider.Response{}, &provider.Error{HTTPStatus: 401, Message: "bad key"}
	case strings.HasPrefix(text, "busy") && req.Attempt == 1:
		return provider.Response{}, &provider.Error{HTTPStatus: 503, Message: "overloaded"}
	case strings.HasPrefix(text, "cut") && req.Attempt == 1:
		onText("partial")
		return provider.Response{}, &provider.Error{Kind: modelretry.KindStreamInterrupted, Message: "eof"}
	case strings.HasPrefix(text, "block") || (strings.HasPrefix(text, "crash") && req.Attempt == 1):
		onText("working")
		m.started <- text
		<-ctx.Done()
		return provider.Response{}, ctx.Err()
	case text == "empty":
		return done, nil
	}
	onText("re: " + text)
	return done, nil
}

// historyOf returns the messages of the last request whose turn text is
// text.
func (m *histModel) historyOf(t *testing.T, text string) []provider.Message {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.reqs) - 1; i >= 0; i-- {
		if h := m.reqs[i]; h[len(h)-1].Text == text {
			return h
		}
	}
	t.Fatalf("no request for %q", text)
	return nil
}

func (m *histModel) waitStarted(t *testing.T, text string) {
	t.Helper()
	select {
	case got := <-m.started:
		if got != text {
			t.Fatalf("%q started, want %q", got, text)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%q never reached the model", text)
	}
}

// recSub is a Subscriber that records everything delivered to it.
type recSub struct {
	mu     sync.Mutex
	ns     []Notification
	signal chan struct{}
}

func newRecSub() *recSub { return &recSub{signal: make(chan struct{}, 1)} }

func (r *recSub) Deliver(n Notification) {
	r.mu.Lock()
	r.ns = append(r.ns, n)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *recSub) Replay(_ context.Context, n Notification) error {
	r.Deliver(n)
	return nil
}

func (r *recSub) Subscribed(string, string) {}
func (r *recSub) Broadcasts() bool          { return false }

func (r *recSub) all() []Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ns)
}

type frame struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func params[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var f frame
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("frame %s: %v", raw, err)
	}
	var v T
	if err := json.Unmarshal(f.Params, &v); err != nil {
		t.Fatalf("params %s: %v", f.Params, err)
	}
	return v
}

// waitTerminal waits for turnID's turn/completed.
func (r *recSub) waitTerminal(t *testing.T, turnID string) msp.TurnCompletedParams {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		for _, n := range r.all() {
			if n.Method == msp.NotifyTurnCompleted {
				if p := params[msp.TurnCompletedParams](t, n.Frame); p.TurnID == turnID {
					return p
				}
			}
		}
		select {
		case <-r.signal:
		case <-deadline:
			t.Fatalf("turn %s never completed", turnID)
		}
	}
}

// of returns the params of every notification of one method.
func of[T any](t *testing.T, r *recSub, method string) []T {
	var out []T
	for _, n := range r.all() {
		if n.Method == method {
			out = append(out, params[T](t, n.Frame))
		}
	}
	return out
}

type mgrOpts struct {
	maxQueued      int
	now            func() time.Time
	textCheckpoint time.Duration
	tools          turn.Toolbox
	runner         func(*turn.Config) // adjusts the runner's config
}

// ticking is a clock that moves a millisecond every time it is read, so
// that a text checkpoint of less than that saves every delta.
func ticking() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Millisecond)
		return t
	}
}

func newManager(t testing.TB, st store.Store, model provider.Model, o mgrOpts) *Manager {
	t.Helper()
	var adjust []func(*turn.Config)
	if o.runner != nil {
		adjust = append(adjust, o.runner)
	}
	m, err := New(context.Background(), Config{Store: st, Runner: newTestRunner(model, adjust...), LogPath: "test.db",
		MaxQueuedTurns: o.maxQueued, Now: o.now, TextCheckpoint: o.textCheckpoint, Logger: slog.New(slog.DiscardHandler),
		Tools: o.tools})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// attachAtHead subscribes sub to session sid from where it stands on m
// now, as a view/subscribe without after does.
func attachAtHead(ctx context.Context, m *Manager, sub Subscriber, sid string) error {
	s, release, err := m.acquire(ctx, sid)
	if err != nil {
		return err
	}
	defer release()
	s.mu.Lock()
	from := s.at(s.head, s.sub)
	s.mu.Unlock()
	return s.subscribe(ctx, sub, from)
}

// newTestRunner runs turns on model with the default policy and no
// backoff: Rand 0 with full jitter makes every delay zero; adjust changes
// the rest.
func newTestRunner(model provider.Model, adjust ...func(*turn.Config)) *turn.Runner {
	cfg := turn.Config{
		Model:  model,
		Engine: &modelretry.Engine{Clock: retrytest.NewClock(time.Now()), Rand: retrytest.Fixed(0)},
		Policy: modelretry.DefaultPolicy(),
	}
	for _, f := range adjust {
		f(&cfg)
	}
	return turn.NewRunner(cfg)
}

var cmdSeq atomic.Int64

func cmdID() string { return fmt.Sprintf("cmd-%d", cmdSeq.Add(1)) }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// startSession creates a session and subscribes sub to it.
func startSession(t testing.TB, m *Manager, sub Subscriber) string {
	t.Helper()
	ctx := context.Background()
	raw, attach, err := m.StartSession(ctx, sub, mustJSON(msp.SessionStartParams{CommandID: cmdID()}))
	if err != nil {
		t.Fatal(err)
	}
	var res msp.SessionStartResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	attach(ctx)
	return res.Session.SessionID
}

// subscribe attaches sub to an existing session from its start.
func subscribe(t *testing.T, m *Manager, sub Subscriber, sid string) {
	t.Helper()
	from := cursorIn(t, m.store, sid, 0)
	if err := m.attach(context.Background(), sub, sid, from); err != nil {
		t.Fatal(err)
	}
}

// startTurn admits a turn and launches it, returning its ack.
func startTurn(t testing.TB, m *Manager, p msp.TurnStartParams) msp.TurnStartResult {
	t.Helper()
	if p.CommandID == "" {
		p.CommandID = cmdID()
	}
	raw, launch, err := m.StartTurn(context.Background(), nil, mustJSON(p))
	if err != nil {
		t.Fatalf("turn/start %+v: %v", p.Input, err)
	}
	launch()
	var ack msp.TurnStartResult
	if err := json.Unmarshal(raw, &ack); err != nil {
		t.Fatal(err)
	}
	return ack
}

func textTurn(sid, text string) msp.TurnStartParams {
	return msp.TurnStartParams{SessionID: sid, Input: []msp.TurnInputPart{{Type: "text", Text: text}}}
}

// runTurn runs one turn to its terminal.
func runTurn(t *testing.T, m *Manager, sub *recSub, p msp.TurnStartParams) msp.TurnCompletedParams {
	t.Helper()
	ack := startTurn(t, m, p)
	return sub.waitTerminal(t, ack.TurnID)
}

func interrupt(t *testing.T, m *Manager, sid string) {
	t.Helper()
	if _, err := m.StopTurn(context.Background(), msp.MethodTurnInterrupt,
		mustJSON(msp.TurnStopParams{CommandID: cmdID(), SessionID: sid})); err != nil {
		t.Fatal(err)
	}
}

func user(s string) provider.Message  { return provider.Message{Role: provider.RoleUser, Text: s} }
func agent(s string) provider.Message { return provider.Message{Role: provider.RoleAssistant, Text: s} }

func wantHistory(t *testing.T, got, want []provider.Message) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("history\n got %+v\nwant %+v", got, want)
	}
}

func TestHistoryAcrossTurnsAndRestart(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m1 := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m1, sub)

	for _, tt := range []struct {
		text, terminal string
	}{
		{"one", msp.TerminalCompleted},
		{"fail", msp.TerminalFailed},
		{"cut", msp.TerminalCompleted}, // its first, cut attempt is not history
	} {
		if c := runTurn(t, m1, sub, textTurn(sid, tt.text)); c.Terminal != tt.terminal {
			t.Fatalf("turn %q ended %s: %+v", tt.text, c.Terminal, c)
		}
	}
	ack := startTurn(t, m1, textTurn(sid, "block"))
	model.waitStarted(t, "block")
	interrupt(t, m1, sid)
	if c := sub.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCancelled {
		t.Fatalf("interrupted turn ended %+v", c)
	}
	if c := runTurn(t, m1, sub, textTurn(sid, "last")); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("last turn: %+v", c)
	}
	want := []provider.Message{user("one"), agent("re: one"), user("fail"), user("cut"), agent("re: cut"), user("block"), user("last")}
	wantHistory(t, model.historyOf(t, "last"), want)

	// A new manager over the same store rebuilds the same history.
	m1.Close()
	m2 := newManager(t, st, model, mgrOpts{})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	if c := runTurn(t, m2, sub2, textTurn(sid, "again")); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("turn after restart: %+v", c)
	}
	wantHistory(t, model.historyOf(t, "again"), append(want, agent("re: last"), user("again")))

	// session/tokenUsage's cumulative totals grow by each response's usage,
	// across turns and across the restart, and never decrease.
	all := of[msp.SessionTokenUsageParams](t, sub2, msp.NotifySessionTokenUsage)
	if len(all) != 4 { // one, cut, last, again (fail was refused; cut's first attempt and block reported none)
		t.Fatalf("%d session/tokenUsage events, want 4", len(all))
	}
	for i, u := range all {
		want := msp.CumulativeTokenUsage{PromptTokens: int64(10 * (i + 1)), OutputTokens: int64(5 * (i + 1)), TotalTokens: int64(15 * (i + 1))}
		if u.Cumulative != want {
			t.Errorf("tokenUsage %d: cumulative %+v, want %+v", i, u.Cumulative, want)
		}
	}
}

// A restarted session must send the model exactly the history a live one
// would have sent: the reload folds the log, the live session appends as
// turns finish, and both must agree.
func TestHistoryAfterReloadMatchesLive(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`)
	tests := []struct {
		name string
		turn func(sid string) msp.TurnStartParams
	}{
		{"empty answer", func(sid string) msp.TurnStartParams { return textTurn(sid, "empty") }},
		{"schema-rejected attempt", func(sid string) msp.TurnStartParams {
			p := textTurn(sid, "structured")
			p.ResponseSchema = schema
			return p
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openStore(t)
			model := newHistModel()
			m1 := newManager(t, st, model, mgrOpts{})
			sub := newRecSub()
			sid := startSession(t, m1, sub)
			if c := runTurn(t, m1, sub, tt.turn(sid)); c.Terminal != msp.TerminalCompleted {
				t.Fatalf("turn: %+v", c)
			}
			runTurn(t, m1, sub, textTurn(sid, "live"))
			live := model.historyOf(t, "live")

			m1.Close()
			m2 := newManager(t, st, model, mgrOpts{})
			sub2 := newRecSub()
			subscribe(t, m2, sub2, sid)
			runTurn(t, m2, sub2, textTurn(sid, "reloaded"))
			wantHistory(t, model.historyOf(t, "reloaded"), append(slices.Clone(live), agent("re: live"), user("reloaded")))
		})
	}
}

// crashStore stands in for a process that dies: once dead, nothing more
// reaches the log.
type crashStore struct {
	store.Store
	dead atomic.Bool
}

func (c *crashStore) Commit(ctx context.Context, b store.Batch) error {
	if c.dead.Load() {
		return errors.New("the process died")
	}
	return c.Store.Commit(ctx, b)
}

func records(t *testing.T, st store.Store, sid string) []store.Record {
	t.Helper()
	recs, err := st.Records(context.Background(), sid, 0, store.Limit{Rows: 10000, Bytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func recordParams[T any](t *testing.T, r store.Record) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Params, &v); err != nil {
		t.Fatalf("record %d: %v", r.Seq, err)
	}
	return v
}

// TestRecoveryResumesAbandonedTurns: a process dies in the middle of a
// streaming attempt, whose text it saved, with a turn queued behind. The
// next one closes the cut item as failed, resumes the running turn as a
// new attempt after a turn/retryScheduled saying why (attempts.count
// includes the lost attempt, whose usage is unknown), then launches the
// queued turn, exactly once.
func TestRecoveryResumesAbandonedTurns(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	cs := &crashStore{Store: st}
	model := newHistModel()
	clock := ticking()
	m1 := newManager(t, cs, model, mgrOpts{now: clock, textCheckpoint: time.Microsecond})
	sub := newRecSub()
	sid := startSession(t, m1, sub)

	running := startTurn(t, m1, textTurn(sid, "crash"))
	model.waitStarted(t, "crash")
	queued := startTurn(t, m1, textTurn(sid, "queued"))
	if queued.Disposition != msp.DispositionQueued {
		t.Fatalf("second turn: %+v", queued)
	}
	agentItem := of[msp.ItemParams](t, sub, msp.NotifyItemStarted)[0].Item.ItemID

	// The process dies mid-turn: nothing it does from now on is written.
	cs.dead.Store(true)
	m1.Close()
	before := records(t, st, sid)

	if last := before[len(before)-1]; last.Method != msp.NotifyItemUpdated {
		t.Fatalf("the streamed text was not saved: the log ends with %s", last.Method)
	}
	m2 := newManager(t, st, model, mgrOpts{now: clock})
	sub2 := newRecSub()
	from := cursorIn(t, st, sid, int64(len(before)))
	if err := m2.attach(ctx, sub2, sid, from); err != nil {
		t.Fatal(err)
	}
	first := sub2.waitTerminal(t, running.TurnID)
	second := sub2.waitTerminal(t, queued.TurnID)
	if first.Terminal != msp.TerminalCompleted || first.Attempts.Count != 2 || first.Attempts.UsageComplete {
		t.Fatalf("resumed turn: %+v %+v; want completed after 2 attempts, usage incomplete", first, first.Attempts)
	}
	if second.Terminal != msp.TerminalCompleted || second.Attempts.Count != 1 {
		t.Fatalf("queued turn: %+v", second)
	}

	recs := records(t, st, sid)
	var methods []string
	for _, r := range recs[len(before):] {
		methods = append(methods, r.Method)
	}
	want := []string{
		msp.NotifyItemCompleted,      // the cut attempt, failed
		msp.NotifyTurnRetryScheduled, // why it runs again
		msp.NotifyItemCompleted, msp.NotifySessionTokenUsage, msp.NotifyTurnCompleted,
		msp.NotifyTurnStarted, msp.NotifyItemCompleted, // the queued turn launches
		msp.NotifyItemCompleted, msp.NotifySessionTokenUsage, msp.NotifyTurnCompleted,
	}
	if !slices.Equal(methods, want) {
		t.Fatalf("after the restart the log gained\n %v\nwant\n %v", methods, want)
	}
	cut := recordParams[msp.ItemParams](t, recs[len(before)]).Item
	if cut.ItemID != agentItem || cut.Status != msp.ItemFailed || !cut.Truncated || deref(cut.Text) != "working" {
		t.Errorf("cut item %+v, want %s failed and truncated with the text saved", cut, agentItem)
	}
	notice := recordParams[msp.TurnRetryScheduledParams](t, recs[len(before)+1])
	if notice.TurnID != running.TurnID || notice.Attempt != 1 || notice.NextAttempt != 2 ||
		notice.Reason != "the server restarted during attempt 1" {
		t.Errorf("notice %+v", notice)
	}
	started := 0
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Fatalf("log not dense at %d: seq %d", i, r.Seq)
		}
		if r.Method == msp.NotifyTurnStarted && recordParams[msp.TurnStartedParams](t, r).TurnID == queued.TurnID {
			started++
		}
	}
	if started != 1 {
		t.Errorf("the queued turn started %d times", started)
	}
	row, err := st.Session(ctx, sid)
	if err != nil || row.Busy {
		t.Fatalf("row after recovery: %+v, %v", row, err)
	}
	wantHistory(t, model.historyOf(t, "queued"), []provider.Message{user("crash"), agent("re: crash"), user("queued")})

	// Recovery is done once: another restart appends nothing.
	m2.Close()
	head := len(records(t, st, sid))
	newManager(t, st, model, mgrOpts{now: clock}).Close()
	if n := len(records(t, st, sid)); n != head {
		t.Fatalf("a second recovery appended %d records", n-head)
	}
}

func TestListSessionsPages(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{now: now})
	var ids []string // oldest first
	for range 5 {
		ids = append(ids, startSession(t, m, newRecSub()))
	}
	list := func(p msp.SessionListParams) msp.SessionListResult {
		t.Helper()
		res, err := m.ListSessions(ctx, mustJSON(p))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var got []string
	var cursor *string
	for page := 0; ; page++ {
		res := list(msp.SessionListParams{Cursor: cursor, Limit: new(2)})
		if len(res.Sessions) > 2 {
			t.Fatalf("page %d has %d sessions", page, len(res.Sessions))
		}
		for _, s := range res.Sessions {
			got = append(got, s.SessionID)
		}
		if res.NextCursor == nil {
			if page != 2 {
				t.Fatalf("paging ended after page %d", page)
			}
			break
		}
		cursor = res.NextCursor
	}
	newestFirst := slices.Clone(ids)
	slices.Reverse(newestFirst)
	if !slices.Equal(got, newestFirst) {
		t.Fatalf("listed %v, want %v", got, newestFirst)
	}

	// A page that ends exactly at the last session has no next cursor.
	if res := list(msp.SessionListParams{Limit: new(5)}); len(res.Sessions) != 5 || res.NextCursor != nil {
		t.Fatalf("limit 5: %d sessions, next %v", len(res.Sessions), res.NextCursor)
	}
	if res := list(msp.SessionListParams{}); len(res.Sessions) != 5 || res.NextCursor != nil {
		t.Fatalf("default limit: %d sessions", len(res.Sessions))
	}
	if res, err := m.ListSessions(ctx, nil); err != nil || len(res.Sessions) != 5 {
		t.Fatalf("no params: %v, %v", res, err)
	}

	// Activity moves a session to the front.
	sub := newRecSub()
	subscribe(t, m, sub, ids[0])
	runTurn(t, m, sub, textTurn(ids[0], "hello"))
	if res := list(msp.SessionListParams{Limit: new(1)}); len(res.Sessions) != 1 || res.Sessions[0].SessionID != ids[0] ||
		res.Sessions[0].TurnCount != 1 || res.Sessions[0].FirstUserPrompt != "hello" {
		t.Fatalf("after a turn: %+v", res.Sessions)
	}

	_, err := m.ListSessions(ctx, mustJSON(msp.SessionListParams{Cursor: new("not a cursor!")}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Code != msp.CodeInvalidParams || me.Data.Details["field"] != "cursor" {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestStartTurnRefusesUnsupportedInput(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	head, err := m.Head(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	const id = "refused-then-fine"
	text := []msp.TurnInputPart{{Type: "text", Text: "hi"}}
	tests := []struct {
		name   string
		p      msp.TurnStartParams
		field  string
		reason string
	}{
		{"ifBusy steer", msp.TurnStartParams{Input: text, IfBusy: msp.IfBusySteer}, "ifBusy", "unsupported"},
		{"ifBusy replace", msp.TurnStartParams{Input: text, IfBusy: msp.IfBusyReplace}, "ifBusy", "unsupported"},
		{"ifBusy unknown", msp.TurnStartParams{Input: text, IfBusy: "later"}, "ifBusy", "unsupported"},
		{"image part not an image", msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "image", Base64Data: "AAAA", MediaType: "image/png"}}}, "input.0.base64Data", msp.ReasonBadImage},
		{"second part unknown", msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: "a"}, {Type: "localImage"}}}, "input.1.type", "unsupported"},
		{"no parts", msp.TurnStartParams{Input: []msp.TurnInputPart{}}, "input", ""},
		{"blank text", msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: " \n "}}}, "input.0.text", ""},
		{"broken responseSchema", msp.TurnStartParams{Input: text, ResponseSchema: json.RawMessage(`{"type":12}`)}, "responseSchema", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			p.CommandID, p.SessionID = id, sid
			_, _, err := m.StartTurn(ctx, nil, mustJSON(p))
			var me *msp.Error
			if !errors.As(err, &me) || me.Code != msp.CodeInvalidParams || me.Data.Kind != msp.KindInvalidParams {
				t.Fatalf("err %v, want invalidParams", err)
			}
			if me.Data.Details["field"] != tt.field || me.Data.Reason != tt.reason {
				t.Fatalf("field %v reason %q, want %q %q", me.Data.Details["field"], me.Data.Reason, tt.field, tt.reason)
			}
		})
	}
	// Nothing was written, and the commandId is still free.
	if h, _ := m.Head(ctx, sid); h != head {
		t.Fatalf("refusals moved the head %s → %s", head, h)
	}
	ack := startTurn(t, m, msp.TurnStartParams{CommandID: id, SessionID: sid, Input: text, IfBusy: msp.IfBusyQueue})
	if ack.Disposition != msp.DispositionStarted || ack.TurnID != id {
		t.Fatalf("ack %+v", ack)
	}
	sub.waitTerminal(t, id)
}

func TestQueueBackpressure(t *testing.T) {
	ctx := context.Background()
	model := newHistModel()
	m := newManager(t, openStore(t), model, mgrOpts{maxQueued: 1})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	first := startTurn(t, m, textTurn(sid, "block"))
	model.waitStarted(t, "block")
	second := startTurn(t, m, textTurn(sid, "queued"))
	if first.Disposition != msp.DispositionStarted || second.Disposition != msp.DispositionQueued || second.StartedNewTurn {
		t.Fatalf("acks %+v %+v", first, second)
	}
	third := textTurn(sid, "third")
	third.CommandID = "third"
	_, _, err := m.StartTurn(ctx, nil, mustJSON(third))
	var me *msp.Error
	if !errors.As(err, &me) || me.Code != -32031 || me.Data.Kind != msp.KindBackpressured ||
		me.Data.Capacity != 1 || me.Data.Retryable == nil || !*me.Data.Retryable {
		t.Fatalf("third turn: %v (%+v)", err, me)
	}

	interrupt(t, m, sid)
	if c := sub.waitTerminal(t, first.TurnID); c.Terminal != msp.TerminalCancelled {
		t.Fatalf("first: %+v", c)
	}
	if c := sub.waitTerminal(t, second.TurnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("second: %+v", c)
	}
	// Backpressure is not recorded: the same commandId succeeds later.
	ack := startTurn(t, m, third)
	if ack.TurnID != "third" || ack.Disposition != msp.DispositionStarted {
		t.Fatalf("third after the queue drained: %+v", ack)
	}
	if c := sub.waitTerminal(t, "third"); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("third: %+v", c)
	}
}

func methodsOf(ns []Notification) []string {
	ms := make([]string, len(ns))
	for i, n := range ns {
		ms[i] = n.Method
	}
	return ms
}

func cursorsOf(ns []Notification) []string {
	cs := make([]string, len(ns))
	for i, n := range ns {
		cs[i] = n.Cursor
	}
	return cs
}
