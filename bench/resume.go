package bench

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// resume: a client resumes a session of ResumeEvents durable events from
// its first cursor; events/s until the last one arrived, against
// coder/websocket alone writing as many frames of the same mean size to
// one connection.
func (r *runner) resume(ctx context.Context) error {
	srv, err := r.startServer(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	ss, err := setupSessions(ctx, srv.url, 1)
	if err != nil {
		return err
	}
	defer closeSessions(ss)
	s := ss[0]
	r.logf("  filling a log of %d events", r.cfg.ResumeEvents)
	head, err := fillLog(ctx, s, r.cfg.ResumeEvents)
	if err != nil {
		return err
	}
	rc, err := dialRaw(ctx, r.raw, 1)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	defer rc.close()
	// Rounds of mspd and the baseline alternate, so that both see the
	// same machine; a resume lasts tens of milliseconds, which one
	// neighbour's burst of work would otherwise decide.
	var times, rawTimes, cpus []float64
	var events, bytes int
	var frame []byte
	for range r.cfg.Rounds {
		cpu0, _ := srv.cpu()
		start := time.Now()
		if events, bytes, err = resumeOnce(ctx, srv.url, s, head); err != nil {
			return err
		}
		times = append(times, time.Since(start).Seconds())
		cpu1, _ := srv.cpu()
		cpus = append(cpus, perItem(cpu1-cpu0, events))
		frame = deltaFrameOfSize(bytes / events)
		raw, err := rc.round(ctx, events, frame)
		if err != nil {
			return fmt.Errorf("raw baseline: %w", err)
		}
		rawTimes = append(rawTimes, raw.elapsed.Seconds())
	}
	if r.cfg.Profile != "" {
		err := r.profile(ctx, srv, r.cfg.Profile+".resume", func(ctx context.Context) error {
			_, _, err := resumeOnce(ctx, srv.url, s, head)
			return err
		})
		if err != nil {
			return err
		}
	}
	elapsed, rawElapsed := median(times), median(rawTimes)
	scen := fmt.Sprintf("resume %d events", events)
	note := fmt.Sprintf("median of %d rounds", r.cfg.Rounds)
	r.add(Row{Scenario: scen, Figure: "replayed events/s", Value: float64(events) / elapsed, Unit: "/s",
		Baseline: float64(events) / rawElapsed, Note: fmt.Sprintf("%d-byte mean frame; %s", len(frame), note)})
	r.add(Row{Scenario: scen, Figure: "resume → last event", Value: elapsed * 1e3, Unit: "ms",
		Baseline: rawElapsed * 1e3, Ratio: rawElapsed / elapsed, Note: "ratio: baseline ÷ mspd; " + note})
	r.add(Row{Scenario: scen, Figure: "server CPU per event", Value: median(cpus), Unit: "µs", Note: note})
	return nil
}

// resumeOnce resumes s from its first cursor on a new connection and
// reads until the event at head; it returns the events and bytes read.
func resumeOnce(ctx context.Context, url string, s session, head string) (events, bytes int, err error) {
	c, err := dialReady(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer c.close()
	cursor := s.cursor
	if _, err := c.send(ctx, msp.MethodSessionResume, msp.SessionResumeParams{CommandID: newCommandID(), SessionID: s.id, Cursor: &cursor}); err != nil {
		return 0, 0, err
	}
	for {
		f, err := c.read(ctx)
		if err != nil {
			return 0, 0, err
		}
		if methodOf(f) == nil {
			continue // the resume's own answer
		}
		events++
		bytes += len(f)
		if string(stringMember(f, "viewCursor")) == head {
			return events, bytes, nil
		}
	}
}

// fillLog runs one-delta turns on s until its log holds at least n durable
// events, and returns the cursor of the last one.
func fillLog(ctx context.Context, s session, n int) (string, error) {
	script := scripted.Script(scripted.Step{Text: "ok"})
	for {
		if err := s.c.sendTurn(ctx, s.id, script); err != nil {
			return "", err
		}
		for {
			f, err := s.c.read(ctx)
			if err != nil {
				return "", err
			}
			if string(methodOf(f)) != msp.NotifyTurnCompleted {
				continue
			}
			cursor := string(stringMember(f, "viewCursor"))
			if seq, err := durableSeq(cursor); err != nil {
				return "", err
			} else if seq >= n {
				return cursor, nil
			}
			break
		}
	}
}

// durableSeq reads the sequence of a durable cursor. Clients treat
// cursors as opaque; the benchmark knows mspd's (v:<session>:<seq>, or
// v:<session>:<epoch>-<seq> for a session made since epochs).
func durableSeq(cursor string) (int, error) {
	pos := cursor[strings.LastIndexByte(cursor, ':')+1:]
	if _, after, ok := strings.Cut(pos, "-"); ok {
		pos = after // past the session's cursor epoch
	}
	seq, err := strconv.Atoi(pos)
	if err != nil {
		return 0, fmt.Errorf("cursor %q: %w", cursor, err)
	}
	return seq, nil
}

// deltaFrameOfSize renders an item/delta frame of about size bytes (at
// least the smallest such frame), as mspd would encode it.
func deltaFrameOfSize(size int) []byte {
	sid, item := uuid.NewString(), uuid.NewString()
	frame := func(text string) []byte {
		p, _ := msp.Marshal(msp.ItemDeltaParams{SessionID: sid, ViewCursor: "v:" + sid + ":1234.5", ItemID: item, Delta: text})
		return msp.EncodeNotification(msp.NotifyItemDelta, p, time.Now().UnixMilli())
	}
	pad := max(1, size-len(frame("")))
	return frame(string(bytes.Repeat([]byte("x"), pad)))
}
