package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mspd/auth"
)

// TestReloadBeforeRegistrationEndsTheConnection: a connection whose
// handshake authenticated just before a reload revoked its token, and
// which registers only after the reload looked at the open connections,
// is still ended as revoked; one whose token holds is not.
func TestReloadBeforeRegistrationEndsTheConnection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	const alice, bob = "alice-token-0123456789", "bob-token-0123456789"
	if err := os.WriteFile(path, []byte("alice "+alice+"\nbob "+bob+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(context.Background(), auth.Config{TokensFile: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := testManager(t)
	srv, err := New(m, Config{Auth: authn, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	credential := func(tok string) auth.Credential {
		r := httptest.NewRequest("GET", "/msp", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		c, err := authn.Authenticate(r)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	aliceCred, bobCred := credential(alice), credential(bob)

	if err := os.WriteFile(path, []byte("bob "+bob+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	open := func(cred auth.Credential) *conn {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() })
		c := srv.open(context.Background(), cred, newLineTransport(pr, io.Discard, pr, 1<<20), srv.log)
		go srv.serveConn(c)
		return c
	}
	late, kept := open(aliceCred), open(bobCred)
	select {
	case <-late.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection of a revoked credential was not ended")
	}
	if !late.credEnded.Load() {
		t.Error("the connection ended, but not as its credential's end")
	}
	if kept.credEnded.Load() {
		t.Error("the connection of a credential that holds was ended")
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
