package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"mspd/internal/testlog"
)

const (
	aliceToken = "alice-0123456789abcdef"
	bobToken   = "bob-0123456789abcdef"
	carolToken = "carol-0123456789abcdef"
)

func newAuth(t *testing.T, cfg Config) *Authenticator {
	t.Helper()
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// wantPrincipal checks that r authenticates as principal.
func wantPrincipal(t *testing.T, a *Authenticator, r *http.Request, principal string) {
	t.Helper()
	got, err := a.Authenticate(r)
	if err != nil || got.Principal != principal {
		t.Errorf("Authenticate = %q, %v; want %q", got.Principal, err, principal)
	}
}

// wantRefusal checks that r is refused for reason.
func wantRefusal(t *testing.T, a *Authenticator, r *http.Request, reason string) {
	t.Helper()
	p, err := a.Authenticate(r)
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Reason != reason {
		t.Errorf("Authenticate = %q, %v; want the refusal %q", p.Principal, err, reason)
	}
}

func TestTokensFile(t *testing.T) {
	path := writeFile(t, "tokens", []byte("# service accounts\n\nalice "+aliceToken+"\n\tbob\t"+bobToken+"  \r\n"+
		"alice "+carolToken+"\n"))
	a := newAuth(t, Config{TokensFile: path, Token: "shared-token"})
	wantPrincipal(t, a, bearer(aliceToken), "alice")
	wantPrincipal(t, a, bearer(carolToken), "alice") // a second token of one principal (rotation)
	wantPrincipal(t, a, bearer(bobToken), "bob")
	wantPrincipal(t, a, bearer("shared-token"), "")
	wantRefusal(t, a, bearer("alice"), "unknown token")
	wantRefusal(t, a, bearer(aliceToken+"x"), "unknown token")
	wantRefusal(t, a, httptest.NewRequest(http.MethodGet, "/msp", nil), "no token")
}

func TestTokensFileMalformed(t *testing.T) {
	for name, tc := range map[string]struct {
		file, shared, want string
	}{
		"one field":       {"# c\nalice " + aliceToken + "\n" + bobToken + "\n", "", "line 3: want \"principal token\", found 1 fields"},
		"three fields":    {"alice " + aliceToken + " extra\n", "", "line 1: want \"principal token\", found 3 fields"},
		"short token":     {"\nalice short\n", "", "line 2: token shorter than 16 characters"},
		"duplicate token": {"alice " + aliceToken + "\nbob " + aliceToken + "\n", "", "line 2: token already given on line 1"},
		"control char":    {"al\x01ice " + aliceToken + "\n", "", "line 1: control character"},
		"shared token":    {"alice " + aliceToken + "\n", aliceToken, "the shared token: token already given on line 1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(context.Background(), Config{TokensFile: writeFile(t, "tokens", []byte(tc.file)), Token: tc.shared})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			for _, tok := range []string{aliceToken, bobToken} {
				if strings.Contains(err.Error(), tok) {
					t.Errorf("the error quotes a token: %v", err)
				}
			}
		})
	}
	if _, err := New(context.Background(), Config{TokensFile: "/no/such/file"}); err == nil {
		t.Error("a missing tokens file was accepted")
	}
}

// TestTokensReload: Reload takes a good new file and keeps the old set
// when the new file is bad, logging both without tokens.
func TestTokensReload(t *testing.T) {
	var logs testlog.Buffer
	path := writeFile(t, "tokens", []byte("alice "+aliceToken+"\n"))
	a := newAuth(t, Config{TokensFile: path, Logger: logs.TextLogger()})
	wantPrincipal(t, a, bearer(aliceToken), "alice")

	if err := os.WriteFile(path, []byte("bob "+bobToken+"\ncarol "+carolToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, a, bearer(aliceToken), "unknown token")
	wantPrincipal(t, a, bearer(bobToken), "bob")
	if !strings.Contains(logs.String(), "tokens file reloaded") || !strings.Contains(logs.String(), "principals=2") {
		t.Errorf("the reload is not logged:\n%s", logs.String())
	}

	if err := os.WriteFile(path, []byte("alice "+aliceToken+"\nbroken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Reload of a bad file: %v", err)
	}
	wantPrincipal(t, a, bearer(bobToken), "bob")
	wantRefusal(t, a, bearer(aliceToken), "unknown token")
	if !strings.Contains(logs.String(), "not reloaded; the previous tokens stay in force") {
		t.Errorf("the failed reload is not logged:\n%s", logs.String())
	}
	for _, tok := range []string{aliceToken, bobToken, carolToken} {
		if strings.Contains(logs.String(), tok) {
			t.Errorf("the log shows a token:\n%s", logs.String())
		}
	}
}

// TestRequestToken: a token is taken from the bearer header, a
// msp.bearer.<token> subprotocol or ?access_token=.
func TestRequestToken(t *testing.T) {
	a := newAuth(t, Config{Token: "shared-token"})
	sub := httptest.NewRequest(http.MethodGet, "/msp", nil)
	sub.Header.Set("Sec-WebSocket-Protocol", "msp, msp.bearer.shared-token")
	wantPrincipal(t, a, sub, "")
	wantPrincipal(t, a, httptest.NewRequest(http.MethodGet, "/msp?access_token=shared-token", nil), "")
	wantRefusal(t, a, httptest.NewRequest(http.MethodGet, "/msp?access_token=wrong", nil), "unknown token")
	onlyNeutral := httptest.NewRequest(http.MethodGet, "/msp", nil)
	onlyNeutral.Header.Set("Sec-WebSocket-Protocol", "msp")
	wantRefusal(t, a, onlyNeutral, "no token")

	open := newAuth(t, Config{})
	if open.Enabled() {
		t.Error("an empty config is enabled")
	}
	wantPrincipal(t, open, httptest.NewRequest(http.MethodGet, "/msp", nil), "")
}
