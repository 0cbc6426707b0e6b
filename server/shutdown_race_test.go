package server

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
)

// A connection that arrives while Shutdown begins either joins the
// connections Shutdown waits for, before it waits, or is closed: it never
// joins them while Shutdown waits, which the race detector (go test
// -race, as CI runs) reports as an Add racing a Wait. Repeated so that
// the two meet in every order.
func TestConnectionRacingShutdown(t *testing.T) {
	m, _ := testManager(t)
	for range 50 {
		srv, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		r, w := io.Pipe() // never written: the connection waits for input
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); srv.ServeStdio(context.Background(), r, io.Discard) }()
		go func() {
			defer wg.Done()
			if err := srv.Shutdown(context.Background()); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait() // ServeStdio returns: its connection was told to go away, or refused
		w.Close()
	}
}
