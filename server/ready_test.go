package server

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// /readyz follows Ready: 503 with its reason while the store cannot
// write, 200 again once it can.
func TestReadyzFollowsTheStore(t *testing.T) {
	var broken atomic.Bool
	ts := serveFrontDoor(t, Config{Ready: func() error {
		if broken.Load() {
			return errors.New("sqlite: database or disk is full")
		}
		return nil
	}})
	readyz := func() (int, string) {
		t.Helper()
		resp, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz with a healthy store: %d", code)
	}
	broken.Store(true)
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "disk is full") {
		t.Errorf("/readyz with a store that cannot write: %d %q, want 503 with the reason", code, body)
	}
	broken.Store(false)
	if code, _ := readyz(); code != http.StatusOK {
		t.Errorf("/readyz after the store recovered: %d", code)
	}
}
