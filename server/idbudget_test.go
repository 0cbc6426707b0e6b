package server

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"mspd/session"
	"mspd/store/sqlite"
)

// Pages are sized to the frame cap less 64 KiB (a quarter of a small cap)
// for the envelope, the id's echo among it: the longest id the server
// takes, with a full page, stays under the cap. (Ids were echoed whatever
// their length, and a 30 KB one took such an answer over the cap.)
func TestLongestIDWithAFullPageStaysUnderTheCap(t *testing.T) {
	const frameCap = 64 << 10
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := session.New(context.Background(), session.Config{Store: st, Runner: instantRunner{}, MaxFrameBytes: frameCap,
		LogPath: "x.db", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	head := func(sid string) int64 { h, _ := st.Head(context.Background(), sid); return h }
	sid := startWithTurnsText(t, m, head, nopSub{}, 1, strings.Repeat("x", 40<<10))
	srv, err := New(m, Config{MaxFrameBytes: frameCap, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	id := `"` + strings.Repeat("i", maxIDBytes-2) + `"`
	in := `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":` + id + `,"method":"view/page","params":{"sessionId":"` + sid + `","direction":"forward","limit":10}}` + "\n"
	var out bytes.Buffer
	srv.ServeStdio(context.Background(), strings.NewReader(in), &out)
	paged := false
	for line := range bytes.Lines(out.Bytes()) {
		if len(line)-1 > frameCap {
			t.Errorf("a %d-byte answer over the %d-byte cap: %.120s…", len(line)-1, frameCap, line)
		}
		paged = paged || bytes.Contains(line, []byte(id)) && bytes.Contains(line, []byte(`"events"`))
	}
	if !paged {
		t.Errorf("no page answered the long id:\n%.500s", out.String())
	}
}
