package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// pageAll reads a session's whole log with view/page.
func pageAll(t *testing.T, ctx context.Context, c *checkedClient, sid string) []msp.ViewEvent {
	t.Helper()
	var all []msp.ViewEvent
	var cur *string
	for {
		var res msp.ViewPageResult
		if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Cursor: cur, Limit: 1000}, &res); err != nil {
			t.Fatal(err)
		}
		all = append(all, res.Events...)
		if res.NextCursor == nil {
			return all
		}
		cur = res.NextCursor
	}
}

// sansIdentities drops the members a fork re-mints.
func sansIdentities(t *testing.T, raw json.RawMessage) map[string]string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range m {
		if k != "sessionId" && k != "viewCursor" && k != "sourceRange" {
			out[k] = string(v)
		}
	}
	return out
}

// TestForkOverTheWire: session/fork copies the source's recorded turn —
// its retry notices, discarded attempt, items and turn/completed with its
// attempts — equal to the source's apart from the copy's identities; the
// forking connection gets session/started and is subscribed to the fork; a
// replay is exactly-once; a cut at a turn that is not completed is refused
// forkBoundaryInvalid.
func TestForkOverTheWire(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	first, err := c.StartTurn(ctx, sid, scripted.Script(
		scripted.Step{Status: 429, RetryAfterMs: new(5)},
		scripted.Step{Text: "cut short", Cut: true},
		scripted.Step{Text: "the kept answer", Chunks: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, first.TurnID); err != nil {
		t.Fatal(err)
	}
	second, err := c.StartTurn(ctx, sid, "not copied")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, second.TurnID); err != nil {
		t.Fatal(err)
	}

	forker := dial(t, d.URL(), client.Options{})
	fork := msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid, CutPoint: &msp.ForkCutPoint{LastTurnID: first.TurnID}}
	raw, err := forker.CallRaw(ctx, msp.MethodSessionFork, fork)
	if err != nil {
		t.Fatal(err)
	}
	var res msp.SessionSnapshot
	json.Unmarshal(raw, &res)
	fid := res.Session.SessionID
	if n, err := forker.Next(ctx); err != nil || n.Method != msp.NotifySessionStarted || decode[msp.SessionStartedParams](t, n).Session.SessionID != fid {
		t.Fatalf("the forking connection: %v %v", n.Method, err)
	}
	if res.Session.ForkedFrom == nil || res.Session.ForkedFrom.SessionID != sid || res.Session.TurnCount != 1 {
		t.Fatalf("fork session %+v", res.Session)
	}
	src, copied := pageAll(t, ctx, c, sid), pageAll(t, ctx, forker, fid)
	var terminal msp.ViewEvent
	for i, e := range copied {
		if e.Method != src[i].Method || !maps.Equal(sansIdentities(t, e.Params), sansIdentities(t, src[i].Params)) {
			t.Fatalf("copied event %d:\n fork   %s %s\n source %s %s", i, e.Method, e.Params, src[i].Method, src[i].Params)
		}
		if e.Method == msp.NotifyTurnCompleted {
			terminal = e
		}
	}
	if copied[len(copied)-1].Method != msp.NotifyTurnCompleted || len(copied) >= len(src) {
		t.Fatalf("the fork holds %d of the source's %d events, ending with %s", len(copied), len(src), copied[len(copied)-1].Method)
	}
	var done msp.TurnCompletedParams
	json.Unmarshal(terminal.Params, &done)
	if done.Attempts == nil || done.Attempts.Count != 3 || done.TurnID != first.TurnID {
		t.Fatalf("copied terminal %s", terminal.Params)
	}
	for _, m := range []string{msp.NotifyTurnModelRetryScheduled, msp.NotifyTurnRetryScheduled} {
		if !strings.Contains(jsonText(copied), `"method":"`+m+`"`) {
			t.Errorf("the fork lacks the source's %s", m)
		}
	}
	// The fork's next turn runs in the fork; the forking connection sees it.
	ack, err := forker.StartTurn(ctx, fid, "in the fork")
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := forker.WaitTurn(ctx, ack.TurnID); err != nil || decode[msp.TurnCompletedParams](t, evs[len(evs)-1]).Terminal != msp.TerminalCompleted {
		t.Fatalf("turn in the fork: %v", err)
	}
	// Exactly once.
	again, err := forker.CallRaw(ctx, msp.MethodSessionFork, fork)
	if err != nil || string(again) != string(raw) {
		t.Fatalf("replayed fork: %s, %v", again, err)
	}
	var list msp.SessionListResult
	if err := c.Call(ctx, msp.MethodSessionList, map[string]any{}, &list); err != nil || len(list.Sessions) != 2 {
		t.Fatalf("session/list after a fork and its replay: %d sessions, %v", len(list.Sessions), err)
	}
	_, err = c.CallRaw(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid,
		CutPoint: &msp.ForkCutPoint{LastTurnID: client.NewCommandID()}})
	var me *msp.Error
	if !errors.As(err, &me) || me.Code != msp.CodeForkBoundary || me.Data.Kind != msp.KindForkBoundary {
		t.Fatalf("fork at an unknown turn: %v", err)
	}
}

// TestDeleteOverTheWire: session/delete erases the session — a marker text
// from it is nowhere in the store's files afterwards — tells the
// subscribers and the caller with session/deleteCompleted, and every
// later command on it answers sessionNotFound; a replay gets its ack.
func TestDeleteOverTheWire(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, daemon.Config{DataDir: dir})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	const marker = "Axolotl-Marker-4242"
	answerTurn(t, c, sid, "please remember "+marker)
	watcher := dial(t, d.URL(), client.Options{})
	if _, err := watcher.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	del := msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: sid}
	raw, err := c.CallRaw(ctx, msp.MethodSessionDelete, del)
	if err != nil {
		t.Fatal(err)
	}
	for who, cl := range map[string]*checkedClient{"deleter": c, "subscriber": watcher} {
		for {
			n, err := cl.Next(ctx)
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			if n.Method == msp.NotifySessionDeleteCompleted {
				if p := decode[msp.SessionDeleteCompletedParams](t, n); p.Outcome != msp.DeleteCompleted || p.SessionID != sid || p.CommandID != del.CommandID {
					t.Fatalf("%s: %s", who, n.Params)
				}
				break
			}
		}
	}
	for _, name := range []string{"mspd.db", "mspd.db-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			t.Errorf("%s still holds text of the deleted session", name)
		}
	}
	var me *msp.Error
	for method, params := range map[string]any{
		msp.MethodSessionRead:   msp.SessionReadParams{SessionID: sid},
		msp.MethodTurnStart:     msp.TurnStartParams{CommandID: client.NewCommandID(), SessionID: sid, Input: []msp.TurnInputPart{{Type: "text", Text: "hi"}}},
		msp.MethodViewPage:      msp.ViewPageParams{SessionID: sid, Limit: 10},
		msp.MethodSessionRename: msp.SessionRenameParams{CommandID: client.NewCommandID(), SessionID: sid, Name: "x"},
	} {
		if _, err := c.CallRaw(ctx, method, params); !errors.As(err, &me) || me.Data.Kind != msp.KindSessionNotFound {
			t.Errorf("%s after delete: %v", method, err)
		}
	}
	again, err := c.CallRaw(ctx, msp.MethodSessionDelete, del)
	if err != nil || string(again) != string(raw) {
		t.Fatalf("replayed delete: %s, %v", again, err)
	}
}

// TestRenameAndListStream: a second tab that asked for sessionListStream
// sees a new chat, its automatic name, its busy and idle turns, a rename
// and a deletion live; a connection that did not ask sees none of it.
func TestRenameAndListStream(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	tab := dial(t, d.URL(), client.Options{})
	other := dialListening(t, d.URL(), client.Options{})
	if got := other.Init.GrantedCapabilities; !slices.Equal(got, []string{"sessionListStream", "modelRetryScheduled"}) {
		t.Fatalf("granted %v", got)
	}
	quiet := dial(t, d.URL(), client.Options{})
	sid := newSession(t, tab)
	answerTurn(t, tab, sid, "Plan a trip to Lisbon\nwith details")
	var ren msp.SessionRenameResult
	if err := tab.Call(ctx, msp.MethodSessionRename, msp.SessionRenameParams{CommandID: client.NewCommandID(), SessionID: sid, Name: "Lisbon"}, &ren); err != nil || ren.Name != "Lisbon" {
		t.Fatalf("rename: %+v, %v", ren, err)
	}
	if err := tab.Call(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: sid}, nil); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for {
		n, err := other.Next(ctx)
		if err != nil {
			t.Fatalf("%v after %v", err, seen)
		}
		switch n.Method {
		case msp.NotifySessionStarted:
			seen = append(seen, "started")
		case msp.NotifySessionListChanged:
			s := decode[msp.SessionListChangedParams](t, n).Session
			seen = append(seen, s.Status+":"+s.Name)
		case msp.NotifySessionDeleteCompleted:
			seen = append(seen, "deleted")
		}
		if n.Method == msp.NotifySessionDeleteCompleted {
			break
		}
	}
	want := "started running:Plan a trip to Lisbon idle:Plan a trip to Lisbon idle:Lisbon deleted"
	if got := strings.Join(seen, " "); got != want {
		t.Fatalf("the second tab saw\n %s\nwant\n %s", got, want)
	}
	// The connection that did not ask got nothing of it: its first
	// notification is about its own session.
	own, err := quiet.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := quiet.Next(ctx); err != nil || decode[msp.SessionStartedParams](t, n).Session.SessionID != own.Session.SessionID {
		t.Fatalf("a connection without sessionListStream heard %s %s", n.Method, n.Params)
	}
}

// TestSetModelOverTheWire: session/setModel records the selection
// (session/modelChanged, model/list marks it active) and refuses unknown
// models naming the field.
func TestSetModelOverTheWire(t *testing.T) {
	d := startDaemon(t, daemon.Config{ConfigFile: twoProviders(t)})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	if err := c.Call(ctx, msp.MethodSessionSetModel, msp.SessionSetModelParams{CommandID: client.NewCommandID(), SessionID: sid,
		Model: msp.ModelSelection{ModelID: "large"}}, nil); err != nil {
		t.Fatal(err)
	}
	n, err := c.Next(ctx)
	for err == nil && n.Method != msp.NotifySessionModelChanged {
		n, err = c.Next(ctx)
	}
	if p := decode[msp.SessionModelChangedParams](t, n); err != nil || p.ModelID != "large" || p.ProviderID != "a" {
		t.Fatalf("modelChanged %s, %v", n.Params, err)
	}
	var models msp.ModelListResult
	if err := c.Call(ctx, msp.MethodModelList, map[string]any{"sessionId": sid}, &models); err != nil {
		t.Fatal(err)
	}
	for _, m := range models.Models {
		if m.IsActive != (m.ProviderID == "a" && m.ModelID == "large") {
			t.Errorf("model/list marks %s/%s active=%v", m.ProviderID, m.ModelID, m.IsActive)
		}
	}
	var me *msp.Error
	for field, sel := range map[string]msp.ModelSelection{
		"model.modelId":    {ModelID: "huge"},
		"model.providerId": {ProviderID: "zzz", ModelID: "small"},
	} {
		_, err := c.CallRaw(ctx, msp.MethodSessionSetModel, msp.SessionSetModelParams{CommandID: client.NewCommandID(), SessionID: sid, Model: sel})
		if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Details["field"] != field {
			t.Errorf("selection %+v: %v, want invalidParams naming %s", sel, err, field)
		}
	}
}

// TestRetryNoticesRenderedPerConnection: by default — as a client built on
// the upstream SDK connects, asking for nothing — a connection gets each
// provider backoff as turn/retryScheduled (the same record: attempt fields
// and cursor, a reason in words), live and from view/page; one that asked
// for modelRetryScheduled, or opted into the experimental API, gets the
// notice as recorded.
func TestRetryNoticesRenderedPerConnection(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	stable := dial(t, d.URL(), client.Options{StableRetryNotices: true})
	native := dial(t, d.URL(), client.Options{})
	experimental := dial(t, d.URL(), client.Options{StableRetryNotices: true, ExperimentalAPI: true})
	if stable.Init.ExperimentalAPI || !experimental.Init.ExperimentalAPI {
		t.Fatalf("experimentalApi echoed %v and %v, want false and true", stable.Init.ExperimentalAPI, experimental.Init.ExperimentalAPI)
	}
	if slices.Contains(stable.Init.GrantedCapabilities, "modelRetryScheduled") || !slices.Contains(native.Init.GrantedCapabilities, "modelRetryScheduled") {
		t.Fatalf("granted %v and %v", stable.Init.GrantedCapabilities, native.Init.GrantedCapabilities)
	}
	sid := newSession(t, stable)
	for _, c := range []*checkedClient{native, experimental} {
		if _, err := c.Resume(ctx, sid, nil); err != nil {
			t.Fatal(err)
		}
	}
	ack, err := stable.StartTurn(ctx, sid, scripted.Script(scripted.Step{Status: 429, RetryAfterMs: new(5)}, scripted.Step{Text: "ok"}))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[*checkedClient][]client.Notification{}
	for _, c := range []*checkedClient{stable, native, experimental} {
		if seen[c], err = c.WaitTurn(ctx, ack.TurnID); err != nil {
			t.Fatal(err)
		}
	}
	if old := seen[stable]; len(only(old, msp.NotifyTurnModelRetryScheduled)) != 0 || len(only(old, msp.NotifyTurnRetryScheduled)) != 1 {
		t.Fatalf("default connection got %s", compact(methods(old)))
	}
	for _, c := range []*checkedClient{native, experimental} {
		if got := seen[c]; len(only(got, msp.NotifyTurnModelRetryScheduled)) != 1 || len(only(got, msp.NotifyTurnRetryScheduled)) != 0 {
			t.Fatalf("a connection that asked got %s", compact(methods(got)))
		}
	}
	got := decode[msp.TurnRetryScheduledParams](t, only(seen[stable], msp.NotifyTurnRetryScheduled)[0])
	want := decode[msp.TurnModelRetryScheduledParams](t, only(seen[native], msp.NotifyTurnModelRetryScheduled)[0])
	if got.Reason != "scripted · rate limited (HTTP 429)" || got.Attempt != want.Attempt || got.NextAttempt != want.NextAttempt ||
		got.MaxAttempts != want.MaxAttempts || got.RetryDelayMs != want.RetryDelayMs || got.ViewCursor != want.ViewCursor {
		t.Fatalf("stable notice %+v\nas recorded %+v", got, want)
	}
	page := pageAll(t, ctx, stable, sid)
	if s := jsonText(page); strings.Contains(s, msp.NotifyTurnModelRetryScheduled) || !strings.Contains(s, `"method":"`+msp.NotifyTurnRetryScheduled+`"`) {
		t.Fatalf("view/page for the default connection: %s", s)
	}
	if s := jsonText(pageAll(t, ctx, native, sid)); !strings.Contains(s, `"method":"`+msp.NotifyTurnModelRetryScheduled+`"`) {
		t.Fatalf("view/page for a connection that asked: %s", s)
	}
}
