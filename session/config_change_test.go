package session

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"mspd/schema/msp"
)

// fixedCatalog serves a fixed set of providers, each with any model.
type fixedCatalog map[string]bool

func (c fixedCatalog) Resolve(providerID, modelID string) (string, string, error) {
	if providerID == "" {
		providerID = "main"
	}
	if !c[providerID] {
		return "", "", msp.ErrInvalidParams("providerId", "provider %q is not configured", providerID)
	}
	return providerID, modelID, nil
}

func (c fixedCatalog) Serves(providerID string) bool { return c[providerID] }

func newCatalogManager(t *testing.T, cfg Config, model *histModel) *Manager {
	t.Helper()
	cfg.Runner = newTestRunner(model)
	cfg.LogPath = "test.db"
	cfg.Logger = slog.New(slog.DiscardHandler)
	m, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestReplayAnswersBeforeConfigurationChecks: issue 7 defect 4 — after a
// restart with another provider configuration and a smaller frame limit,
// replaying recorded session/start and turn/start commands returns their
// recorded answers byte for byte, not a fresh refusal.
func TestReplayAnswersBeforeConfigurationChecks(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m1 := newCatalogManager(t, Config{Store: st, Catalog: fixedCatalog{"main": true, "extra": true}}, model)
	sub := newRecSub()
	extra := "extra"
	startRaw := mustJSON(msp.SessionStartParams{CommandID: cmdID(), ProviderID: &extra, ModelID: "m1"})
	started, attach, err := m1.StartSession(context.Background(), sub, startRaw)
	if err != nil {
		t.Fatal(err)
	}
	attach(context.Background())
	var res msp.SessionStartResult
	json.Unmarshal(started, &res)
	sid := res.Session.SessionID
	turnRaw := mustJSON(msp.TurnStartParams{CommandID: cmdID(), SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: strings.Repeat("long input ", 2000)}}})
	ack, launch, err := m1.StartTurn(context.Background(), nil, turnRaw)
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var tack msp.TurnStartResult
	json.Unmarshal(ack, &tack)
	sub.waitTerminal(t, tack.TurnID)
	m1.Close()

	// Restarted without the "extra" provider and with 16 KiB frames.
	m2 := newCatalogManager(t, Config{Store: st, Catalog: fixedCatalog{"main": true}, MaxFrameBytes: 16 << 10}, model)
	again, _, err := m2.StartSession(context.Background(), newRecSub(), startRaw)
	if err != nil || string(again) != string(started) {
		t.Fatalf("replayed session/start: %s, %v\nwant the recorded %s", again, err, started)
	}
	againAck, _, err := m2.StartTurn(context.Background(), nil, turnRaw)
	if err != nil || string(againAck) != string(ack) {
		t.Fatalf("replayed turn/start: %s, %v\nwant the recorded %s", againAck, err, ack)
	}

	// A new turn of that session is refused, naming its provider: its
	// model id must not go to the default provider.
	_, _, err = m2.StartTurn(context.Background(), nil, mustJSON(textTurn(sid, "hello")))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || !strings.Contains(me.Message, `"extra"`) {
		t.Fatalf("new turn on a session of an unconfigured provider: %v, want invalidParams naming \"extra\"", err)
	}
}
