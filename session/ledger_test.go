package session

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"mspd/schema/msp"
	"mspd/store"
	"mspd/store/sqlite"
)

func openStore(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func digest(t *testing.T, method, params string) string {
	t.Helper()
	d, err := payloadDigest(method, json.RawMessage(params))
	if err != nil {
		t.Fatalf("payloadDigest(%s, %s): %v", method, params, err)
	}
	return d
}

func TestPayloadDigestIgnoresKeyOrderAndSpacing(t *testing.T) {
	same := [][]string{
		{`{"a":1,"b":[1,2,{"x":"y","w":null}]}`, "{ \"b\" : [ 1 , 2 , { \"w\" : null , \"x\" : \"y\" } ] ,\n\t\"a\" : 1 }"},
		{`{"commandId":"c","sessionId":"s","input":[{"type":"text","text":"hi"}]}`,
			`{"input":[{"text":"hi","type":"text"}],"sessionId":"s","commandId":"c"}`},
		// Absent params and an empty object are the same payload.
		{``, `{}`},
		{"  \n", `{ }`},
		// Equivalent string escapes are the same string.
		{`{"t":"é\u00e9\/"}`, `{"t":"éé/"}`},
	}
	for _, pair := range same {
		if a, b := digest(t, "turn/start", pair[0]), digest(t, "turn/start", pair[1]); a != b {
			t.Errorf("%s and %s digest differently", pair[0], pair[1])
		}
	}
}

func TestPayloadDigestDistinguishes(t *testing.T) {
	base := digest(t, "turn/start", `{"a":1}`)
	if d := digest(t, "turn/interrupt", `{"a":1}`); d == base {
		t.Error("the method is not part of the digest")
	}
	if digest(t, "session/start", `{}`) == digest(t, "session/resume", `{}`) {
		t.Error("distinct methods collide")
	}
	for _, other := range []string{
		`{"a":2}`,
		`{"a":"1"}`,
		`{"a":[1]}`,
		`{"a":1,"b":null}`,
		`{"A":1}`,
		`{}`,
		`null`,
		`[]`,
	} {
		if digest(t, "turn/start", other) == base {
			t.Errorf("%s digests like {\"a\":1}", other)
		}
	}
	// Array order is data.
	if digest(t, "m", `{"a":[1,2]}`) == digest(t, "m", `{"a":[2,1]}`) {
		t.Error("array order ignored")
	}
}

// Numbers are kept as written (UseNumber), never through float64: two
// integers beyond 2^53 that float64 would merge stay distinct, and so do
// 1 and 1.0 (and 1e2 and 100). Treating the latter as equal would need a
// numeric canonical form; mspd chooses the stricter reading, so a client
// that re-serialises a number differently gets command_id_conflict rather
// than a silent replay of a different request.
func TestPayloadDigestKeepsNumbers(t *testing.T) {
	pairs := [][2]string{
		{`{"n":9007199254740993}`, `{"n":9007199254740992}`},
		{`{"n":12345678901234567891}`, `{"n":12345678901234567890}`},
		{`{"n":1}`, `{"n":1.0}`},
		{`{"n":100}`, `{"n":1e2}`},
		{`{"n":0.1}`, `{"n":0.10000000000000001}`},
	}
	for _, p := range pairs {
		if digest(t, "m", p[0]) == digest(t, "m", p[1]) {
			t.Errorf("%s and %s digest alike", p[0], p[1])
		}
	}
	if digest(t, "m", `{"n":1.0}`) != digest(t, "m", `{ "n" : 1.0 }`) {
		t.Error("the same number digests differently")
	}
}

func TestPayloadDigestRejectsNonJSON(t *testing.T) {
	for _, bad := range []string{`{"a":`, `{a:1}`, `'x'`} {
		if _, err := payloadDigest("m", json.RawMessage(bad)); err == nil {
			t.Errorf("payloadDigest accepted %s", bad)
		}
	}
}

// admitOK returns an admit func that records its response in the ledger,
// as the real handlers do, and counts its calls.
func admitOK(st store.Store, calls *atomic.Int32, resp string) func(a *admission) (json.RawMessage, error) {
	return func(a *admission) (json.RawMessage, error) {
		calls.Add(1)
		raw := json.RawMessage(resp)
		if err := st.Commit(context.Background(), store.Batch{Commands: []store.Command{a.entry(raw, false)}}); err != nil {
			return nil, err
		}
		return raw, nil
	}
}

func TestLedgerReplaysStoredResponse(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := newLedger(st)
	var calls atomic.Int32
	const resp = `{"commandId":"c1","status":"accepted","turnId":"c1"}`

	got, replayed, err := l.run(ctx, "c1", msp.MethodTurnStart, json.RawMessage(`{"commandId":"c1","x":[1,2]}`), admitOK(st, &calls, resp))
	if err != nil || replayed || string(got) != resp || calls.Load() != 1 {
		t.Fatalf("first run: %s, replayed %v, err %v, calls %d", got, replayed, err, calls.Load())
	}
	// Same payload in another spelling: the stored bytes, admit not called.
	got, replayed, err = l.run(ctx, "c1", msp.MethodTurnStart, json.RawMessage(`{ "x":[1, 2], "commandId":"c1" }`),
		func(*admission) (json.RawMessage, error) {
			t.Fatal("admit called for a replay")
			return nil, nil
		})
	if err != nil || !replayed || string(got) != resp {
		t.Fatalf("replay: %s, replayed %v, err %v", got, replayed, err)
	}
	// A new ledger over the same store (a restart) replays too.
	got, replayed, err = newLedger(st).run(ctx, "c1", msp.MethodTurnStart, json.RawMessage(`{"commandId":"c1","x":[1,2]}`), admitOK(st, &calls, `{}`))
	if err != nil || !replayed || string(got) != resp || calls.Load() != 1 {
		t.Fatalf("replay after restart: %s, replayed %v, err %v, calls %d", got, replayed, err, calls.Load())
	}
}

func TestLedgerConflict(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := newLedger(st)
	var calls atomic.Int32
	if _, _, err := l.run(ctx, "c1", msp.MethodTurnStart, json.RawMessage(`{"a":1}`), admitOK(st, &calls, `{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		method, params string
	}{
		{msp.MethodTurnStart, `{"a":2}`},
		{msp.MethodTurnInterrupt, `{"a":1}`},
	} {
		got, replayed, err := l.run(ctx, "c1", tt.method, json.RawMessage(tt.params), admitOK(st, &calls, `{}`))
		var me *msp.Error
		if !errors.As(err, &me) || me.Code != msp.CodeCommandRejected || me.Data.Kind != msp.KindCommandRejected ||
			me.Data.Reason != msp.ReasonCommandIDConflict || me.Data.CommandID != "c1" {
			t.Fatalf("%s %s: err %v, want command_id_conflict", tt.method, tt.params, err)
		}
		if got != nil || !replayed {
			t.Errorf("conflict returned %s, replayed %v", got, replayed)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("admit ran %d times", calls.Load())
	}
}

func TestLedgerReplaysStoredRejection(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := newLedger(st)
	var calls atomic.Int32
	reject := func(a *admission) (json.RawMessage, error) {
		calls.Add(1)
		return nil, a.reject(ctx, st, msp.ErrCommandRejected("c1", msp.ReasonMissingRun, "the current turn is not running"))
	}
	_, replayed, err1 := l.run(ctx, "c1", msp.MethodTurnInterrupt, json.RawMessage(`{"commandId":"c1"}`), reject)
	_, replayed2, err2 := l.run(ctx, "c1", msp.MethodTurnInterrupt, json.RawMessage(`{"commandId":"c1"}`), reject)
	var e1, e2 *msp.Error
	if !errors.As(err1, &e1) || !errors.As(err2, &e2) || replayed || !replayed2 {
		t.Fatalf("errors %v / %v, replayed %v / %v", err1, err2, replayed, replayed2)
	}
	b1, _ := json.Marshal(e1)
	b2, _ := json.Marshal(e2)
	if string(b1) != string(b2) || e2.Data.Reason != msp.ReasonMissingRun {
		t.Fatalf("replayed rejection %s, first %s", b2, b1)
	}
	if calls.Load() != 1 {
		t.Fatalf("admit ran %d times", calls.Load())
	}
}

// An error admit returns without recording it (backpressure, a broken
// store) is not durable: the same commandId may be tried again.
func TestLedgerUnrecordedErrorIsNotReplayed(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := newLedger(st)
	busy := msp.NewError(msp.CodeBackpressured, msp.KindBackpressured, "full")
	_, replayed, err := l.run(ctx, "c1", msp.MethodTurnStart, json.RawMessage(`{}`), func(*admission) (json.RawMessage, error) { return nil, busy })
	if err != busy || replayed {
		t.Fatalf("err %v replayed %v", err, replayed)
	}
	var calls atomic.Int32
	got, replayed, err := l.run(ctx, "c1", msp.MethodTurnStart, json.RawMessage(`{}`), admitOK(st, &calls, `{"ok":1}`))
	if err != nil || replayed || string(got) != `{"ok":1}` || calls.Load() != 1 {
		t.Fatalf("second try: %s, replayed %v, err %v", got, replayed, err)
	}
}

// In a synctest bubble, so that the first admission can wait until every
// other run is blocked (synctest.Wait): on the ledger's lock, or, were the
// lock broken, inside admit too.
func TestLedgerSerialisesOneCommandID(t *testing.T) {
	synctest.Test(t, ledgerSerialisesOneCommandID)
}

func ledgerSerialisesOneCommandID(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := newLedger(st)
	var calls atomic.Int32
	var inside atomic.Int32
	var waited atomic.Bool
	admit := func(a *admission) (json.RawMessage, error) {
		if inside.Add(1) != 1 {
			t.Error("two admissions of one commandId overlap")
		}
		defer inside.Add(-1)
		if waited.CompareAndSwap(false, true) {
			synctest.Wait() // the others pile up
		}
		return admitOK(st, &calls, `{"n":1}`)(a)
	}
	const n = 16
	var wg sync.WaitGroup
	var fresh atomic.Int32
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			got, replayed, err := l.run(ctx, "same", msp.MethodTurnStart, json.RawMessage(`{"x":1}`), admit)
			if err != nil || string(got) != `{"n":1}` {
				t.Errorf("run: %s, %v", got, err)
			}
			if !replayed {
				fresh.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if calls.Load() != 1 || fresh.Load() != 1 {
		t.Fatalf("admit ran %d times, %d runs not replayed; want 1 and 1", calls.Load(), fresh.Load())
	}
	l.mu.Lock()
	left := len(l.inflight)
	l.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d commandIds still marked in flight", left)
	}
}

// Different commandIds do not wait for each other: the admission of "a"
// can only finish once "b" has been admitted.
func TestLedgerDoesNotSerialiseDifferentIDs(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := newLedger(st)
	bDone := make(chan struct{})
	var calls atomic.Int32
	errs := make(chan error, 2)
	go func() {
		_, _, err := l.run(ctx, "a", "m", nil, func(a *admission) (json.RawMessage, error) {
			select {
			case <-bDone:
			case <-time.After(10 * time.Second):
				return nil, errors.New("admission of b never ran while a was in flight")
			}
			return admitOK(st, &calls, `{}`)(a)
		})
		errs <- err
	}()
	go func() {
		_, _, err := l.run(ctx, "b", "m", nil, func(a *admission) (json.RawMessage, error) {
			defer close(bDone)
			return admitOK(st, &calls, `{}`)(a)
		})
		errs <- err
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestResumeIsNotRecorded: a session/resume is a read; it leaves nothing
// in the commandId ledger (which would otherwise keep every resume's
// history for the whole retention window).
func TestResumeIsNotRecorded(t *testing.T) {
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "hello"))
	id := cmdID()
	for range 2 {
		if _, _, err := m.ResumeSession(context.Background(), sub, mustJSON(msp.SessionResumeParams{CommandID: id, SessionID: sid})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Command(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the resume's commandId is in the ledger: %v", err)
	}
}
