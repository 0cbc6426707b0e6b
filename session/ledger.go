package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"mspd/schema/msp"
	"mspd/store"
)

// ledger makes state-changing commands exactly-once: the first admission of
// a commandId is written to the store together with its effect, and a replay
// with the same payload gets the stored response back byte for byte.
type ledger struct {
	store store.Store

	mu       sync.Mutex
	inflight map[string]chan struct{} // commandIds being admitted right now
}

func newLedger(st store.Store) *ledger {
	return &ledger{store: st, inflight: make(map[string]chan struct{})}
}

// admission is an open command: the handler decides the response and adds
// entry() to the batch that carries the command's effect.
type admission struct {
	id     string
	digest string
}

// entry is the ledger record for a response.
func (a *admission) entry(resp json.RawMessage, isErr bool) store.Command {
	return store.Command{ID: a.id, Digest: a.digest, Response: resp, IsError: isErr}
}

// reject records a durable rejection so that a replay gets it again.
func (a *admission) reject(ctx context.Context, st store.Store, e *msp.Error) error {
	raw, err := msp.Marshal(e)
	if err != nil {
		return err
	}
	if err := st.Commit(ctx, store.Batch{Commands: []store.Command{a.entry(raw, true)}}); err != nil {
		return msp.ErrInternal("recording rejection: %v", err)
	}
	return e
}

// run admits command id once. If the ledger already has it, the stored
// response is returned (or a command_id_conflict when the payload differs)
// and admit is not called; replayed reports which happened.
func (l *ledger) run(ctx context.Context, id, method string, params json.RawMessage,
	admit func(a *admission) (json.RawMessage, error)) (resp json.RawMessage, replayed bool, err error) {
	return l.runAs(ctx, id, method, params, false, admit)
}

// runCreating is run for a command that makes a session (session/start,
// session/fork). Its entry is erased with the session it made; a replay
// after that is answered by the entry the deletion left in its place
// (see maker.erased), not admitted again: its effect happens once.
func (l *ledger) runCreating(ctx context.Context, id, method string, params json.RawMessage,
	admit func(a *admission) (json.RawMessage, error)) (resp json.RawMessage, replayed bool, err error) {
	return l.runAs(ctx, id, method, params, true, admit)
}

func (l *ledger) runAs(ctx context.Context, id, method string, params json.RawMessage, creating bool,
	admit func(a *admission) (json.RawMessage, error)) (resp json.RawMessage, replayed bool, err error) {
	a, release, err := l.open(ctx, id, method, params)
	if err != nil {
		return nil, false, err
	}
	defer release()
	keys := []string{a.id}
	if creating {
		keys = append(keys, erasedKey(a.id))
	}
	for _, key := range keys {
		if resp, found, err := l.recorded(ctx, key, id, a.digest); found {
			return resp, true, err
		}
	}
	resp, err = admit(a)
	return resp, false, err
}

// maker is the command that made a session, kept in its state so that
// its deletion can leave that command's answer to a replay.
type maker struct {
	Key       string `json:"key"` // its ledger key
	CommandID string `json:"commandId"`
	Digest    string `json:"digest"`
}

// maker is the command being admitted, as the session it makes keeps it.
func (a *admission) maker(commandID string) *maker {
	return &maker{Key: a.id, CommandID: commandID, Digest: a.digest}
}

// erasedKey is the ledger key of the answer a session's deletion leaves
// to the command that made the session, whose own entry (key) goes with
// the session.
func erasedKey(key string) string { return "\x00erased\x00" + key }

// erased is the ledger entry a deletion of session id leaves for the
// command that made it: a rejection that says so, and nothing of the
// session's content. It is kept apart from the session: it outlives it.
func (mk *maker) erased(id string) (store.Command, error) {
	e := msp.ErrCommandRejected(mk.CommandID, msp.ReasonSessionDeleted, "session %s, which command %s made, was deleted", id, mk.CommandID)
	e.Data.SessionID = id
	raw, err := msp.Marshal(e)
	if err != nil {
		return store.Command{}, err
	}
	return store.Command{ID: erasedKey(mk.Key), Digest: mk.Digest, Response: raw, IsError: true}, nil
}

// runAdmitFirst is run for a command whose admission, when it succeeds,
// commits its ledger entry with its effect, which the store refuses for
// a command id it already holds. So the ledger is read only once the
// admission has failed: a new command, nearly every one, costs no read.
// A replay fails its admission (its commit conflicts, or a check the
// first admission passed fails now) and is then answered from the ledger
// as run answers it; nothing of a failed admission is written.
func (l *ledger) runAdmitFirst(ctx context.Context, id, method string, params json.RawMessage,
	admit func(a *admission) (json.RawMessage, error)) (resp json.RawMessage, replayed bool, err error) {
	a, release, err := l.open(ctx, id, method, params)
	if err != nil {
		return nil, false, err
	}
	defer release()
	resp, err = admit(a)
	if err == nil {
		return resp, false, nil
	}
	if prev, found, prevErr := l.recorded(ctx, a.id, id, a.digest); found {
		return prev, true, prevErr
	}
	return nil, false, err
}

// open starts an admission of command id: its ledger key (scoped to the
// caller's principal) and payload digest, with the key locked until
// release.
func (l *ledger) open(ctx context.Context, id, method string, params json.RawMessage) (a *admission, release func(), err error) {
	digest, err := payloadDigest(method, params)
	if err != nil {
		return nil, nil, msp.ErrInvalidParams("", "params: %v", err)
	}
	key := ledgerKey(PrincipalFrom(ctx), id)
	return &admission{id: key, digest: digest}, l.lock(key), nil
}

// recorded answers a command from the ledger: its stored response, or a
// command_id_conflict when the payload differs. found is false when the
// ledger does not hold it; a ledger that cannot be read is found with an
// internal error.
func (l *ledger) recorded(ctx context.Context, key, id, digest string) (resp json.RawMessage, found bool, err error) {
	prev, err := l.store.Command(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, true, msp.ErrInternal("ledger: %v", err)
	case prev.Digest != digest:
		return nil, true, msp.ErrCommandRejected(id, msp.ReasonCommandIDConflict,
			"commandId %s was already used with a different payload", id)
	case prev.IsError:
		var e msp.Error
		if err := json.Unmarshal(prev.Response, &e); err != nil {
			return nil, true, msp.ErrInternal("stored rejection unreadable: %v", err)
		}
		return nil, true, &e
	}
	return prev.Response, true, nil
}

// RecordedSession names the session that the caller's command commandID
// made (session/start, session/fork), as its recorded answer says: "" when
// the ledger holds no such answer for this principal, or cannot be read.
func (m *Manager) RecordedSession(ctx context.Context, commandID string) string {
	prev, err := m.store.Command(ctx, ledgerKey(PrincipalFrom(ctx), commandID))
	if err != nil || prev.IsError {
		return ""
	}
	var res struct {
		Session struct {
			SessionID string `json:"sessionId"`
		} `json:"session"`
	}
	if json.Unmarshal(prev.Response, &res) != nil {
		return ""
	}
	return res.Session.SessionID
}

// ledgerKey scopes a commandId to its principal: one user's commandIds
// can neither replay nor collide with another's.
func ledgerKey(principal, commandID string) string {
	if principal == "" {
		return commandID
	}
	return principal + "\x00" + commandID
}

// lock serialises admissions of one commandId.
func (l *ledger) lock(id string) (release func()) {
	for {
		l.mu.Lock()
		wait, busy := l.inflight[id]
		if !busy {
			done := make(chan struct{})
			l.inflight[id] = done
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.inflight, id)
				l.mu.Unlock()
				close(done)
			}
		}
		l.mu.Unlock()
		<-wait
	}
}

// payloadDigest identifies a command payload independent of key order and
// spacing: the method and the params re-encoded canonically.
func payloadDigest(method string, params json.RawMessage) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	if len(bytes.TrimSpace(params)) == 0 {
		v = map[string]any{}
	} else if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("not JSON: %w", err)
	}
	canon, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), nil
}
