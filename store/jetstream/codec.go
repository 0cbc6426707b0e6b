package jetstream

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mspd/store"
)

// Headers of mspd's own. Everything a scan sorts or filters by is a
// header; everything returned byte for byte is in the payload.
const (
	hdrSeq     = "Mspd-Seq"     // a record's dense per-session sequence
	hdrCreated = "Mspd-Created" // Unix nanoseconds, rows and ledger entries
	hdrUpdated = "Mspd-Updated" // Unix nanoseconds, rows
	hdrBusy    = "Mspd-Busy"    // "1" on busy rows
	hdrErasing = "Mspd-Erasing" // "1" on the row of a session being erased
	// hdrOwner is a row's owner, as a subject token; a row without it was
	// written before the owner index existed (see backfill).
	hdrOwner = "Mspd-Owner"
	// hdrLayout is the layout marker's version (see layout.go).
	hdrLayout = "Mspd-Layout"
	// hdrStreams is, on stream 0's layout marker of layout 3, the stream
	// counts the deployment has used, oldest first ("1,4").
	hdrStreams = "Mspd-Streams"
)

// storedMsg is a message as read back from the stream.
type storedMsg struct {
	subject string
	seq     uint64 // stream sequence
	header  nats.Header
	data    []byte
}

// recordMsg encodes a record. The payload is the method, length-prefixed,
// then the params: both come back exactly, whatever bytes they hold.
func recordMsg(subject string, r store.Record) *nats.Msg {
	data := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(r.Method)+len(r.Params)), uint64(len(r.Method)))
	data = append(append(data, r.Method...), r.Params...)
	m := nats.NewMsg(subject)
	m.Header.Set(hdrSeq, strconv.FormatInt(r.Seq, 10))
	m.Data = data
	return m
}

// positioned is a record and its stream sequence.
type positioned struct {
	store.Record
	stream uint64
}

func decodeRecord(m storedMsg) (positioned, error) {
	seq, err := headerInt(m, hdrSeq)
	if err != nil {
		return positioned{}, err
	}
	method, params, err := splitPrefixed(m)
	if err != nil {
		return positioned{}, err
	}
	return positioned{store.Record{Seq: seq, Method: string(method), Params: params}, m.seq}, nil
}

// rowMsg encodes a session row; the state blob is the payload. The row
// rolls up its subject, so the stream keeps only a session's last row.
func rowMsg(subject string, r *store.Session) *nats.Msg {
	m := keyMsg(subject, r)
	m.Header.Set(hdrOwner, token(r.Owner))
	m.Data = append([]byte(nil), r.State...)
	return m
}

// indexMsg encodes a row's entry in its owner's index: the row's headers,
// by which a listing sorts and filters, without its state. Rolled up too,
// and always written in the batch that writes the row.
func indexMsg(subject string, r *store.Session) *nats.Msg { return keyMsg(subject, r) }

// keyMsg is a rolled-up message carrying what a listing needs of a row.
func keyMsg(subject string, r *store.Session) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set("Nats-Rollup", "sub")
	created, _ := store.UnixNanos(r.CreatedAt) // validated by Commit
	updated, _ := store.UnixNanos(r.UpdatedAt)
	m.Header.Set(hdrCreated, strconv.FormatInt(created, 10))
	m.Header.Set(hdrUpdated, strconv.FormatInt(updated, 10))
	if r.Busy {
		m.Header.Set(hdrBusy, "1")
	}
	if r.Erasing {
		m.Header.Set(hdrErasing, "1")
	}
	return m
}

// busyMsg encodes a row's busy entry, rolled up so that it replaces the
// entry before it. An idle one (Mspd-Busy: 0) says so only until idleTTL
// passes: its rollup has removed the busy entry, and once it expires the
// subject holds nothing, so that the busy index grows with busy sessions,
// not stored ones.
func busyMsg(subject string, busy bool, idleTTL time.Duration) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if busy {
		m.Header.Set(hdrBusy, "1")
		return m
	}
	m.Header.Set(hdrBusy, "0")
	m.Header.Set(jetstream.MsgTTLHeader, idleTTL.String())
	return m
}

func decodeRow(id string, m storedMsg) (store.Session, error) {
	created, err := headerInt(m, hdrCreated)
	if err != nil {
		return store.Session{}, err
	}
	updated, err := headerInt(m, hdrUpdated)
	if err != nil {
		return store.Session{}, err
	}
	owner, err := rowOwner(m)
	if err != nil {
		return store.Session{}, err
	}
	return store.Session{
		ID:        id,
		Owner:     owner,
		CreatedAt: time.Unix(0, created).UTC(),
		UpdatedAt: time.Unix(0, updated).UTC(),
		Busy:      m.header.Get(hdrBusy) == "1",
		State:     m.data,
		Erasing:   m.header.Get(hdrErasing) == "1",
	}, nil
}

// rowOwner reads a row's owner: its header, or for a row written before
// there was one, its state.
func rowOwner(m storedMsg) (string, error) {
	if t := m.header.Values(hdrOwner); len(t) > 0 {
		return untoken(t[0])
	}
	return store.LegacyOwner(m.data), nil
}

// commandMsg encodes a ledger entry: the digest, length-prefixed, a byte
// for IsError, then the response.
func commandMsg(subject string, c store.Command, created int64) *nats.Msg {
	data := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(c.Digest)+1+len(c.Response)), uint64(len(c.Digest)))
	data = append(data, c.Digest...)
	flag := byte(0)
	if c.IsError {
		flag = 1
	}
	data = append(append(data, flag), c.Response...)
	m := nats.NewMsg(subject)
	m.Header.Set(hdrCreated, strconv.FormatInt(created, 10))
	m.Data = data
	return m
}

func decodeCommand(id string, m storedMsg) (store.Command, error) {
	created, err := headerInt(m, hdrCreated)
	if err != nil {
		return store.Command{}, err
	}
	digest, rest, err := splitPrefixed(m)
	if err != nil {
		return store.Command{}, err
	}
	if len(rest) == 0 {
		return store.Command{}, fmt.Errorf("jetstream: ledger entry %q at %d is truncated", id, m.seq)
	}
	return store.Command{
		ID:        id,
		Digest:    string(digest),
		IsError:   rest[0] == 1,
		Response:  rest[1:],
		CreatedAt: time.Unix(0, created).UTC(),
	}, nil
}

// splitPrefixed splits a payload into its length-prefixed head and the rest.
func splitPrefixed(m storedMsg) (head, rest []byte, err error) {
	n, k := binary.Uvarint(m.data)
	if k <= 0 || n > uint64(len(m.data)-k) {
		return nil, nil, fmt.Errorf("jetstream: malformed payload on %s at %d", m.subject, m.seq)
	}
	return m.data[k : k+int(n)], m.data[k+int(n):], nil
}

func headerInt(m storedMsg, key string) (int64, error) {
	v, err := strconv.ParseInt(m.header.Get(key), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("jetstream: message on %s at %d: header %s: %w", m.subject, m.seq, key, err)
	}
	return v, nil
}
