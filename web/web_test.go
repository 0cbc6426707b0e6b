package web

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, method, path string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, req)
	return rec
}

func TestServesFiles(t *testing.T) {
	for path, want := range map[string]string{
		"/":           "text/html; charset=utf-8",
		"/index.html": "text/html; charset=utf-8",
		"/app.js":     "text/javascript; charset=utf-8",
		"/style.css":  "text/css; charset=utf-8",

		"/vendor/markdown-it.min.js":             "text/javascript; charset=utf-8",
		"/vendor/purify.min.js":                  "text/javascript; charset=utf-8",
		"/vendor/VERSIONS":                       "text/plain; charset=utf-8",
		"/vendor/licenses/markdown-it.txt":       "text/plain; charset=utf-8",
		"/vendor/licenses/dompurify-MPL-2.0.txt": "text/plain; charset=utf-8",
	} {
		rec := get(t, http.MethodGet, path, nil)
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d", path, rec.Code)
			continue
		}
		h := rec.Header()
		if got := h.Get("Content-Type"); got != want {
			t.Errorf("GET %s: Content-Type %q, want %q", path, got, want)
		}
		if got := h.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q", path, got)
		}
		if h.Get("ETag") == "" || h.Get("Content-Security-Policy") == "" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", path, h)
		}
		if rec.Body.Len() == 0 {
			t.Errorf("GET %s: empty body", path)
		}
	}
}

func TestRevalidates(t *testing.T) {
	etag := get(t, http.MethodGet, "/app.js", nil).Header().Get("ETag")
	rec := get(t, http.MethodGet, "/app.js", http.Header{"If-None-Match": {etag}})
	if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Errorf("revalidation: %d with %d bytes, want 304 and none", rec.Code, rec.Body.Len())
	}
	if rec := get(t, http.MethodHead, "/", nil); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD /: %d with %d bytes", rec.Code, rec.Body.Len())
	}
}

func TestRefuses(t *testing.T) {
	for _, path := range []string{"/web.go", "/app.js/", "/../go.mod", "/favicon.ico", "/static/app.js",
		"/vendor/", "/vendor/refresh.sh", "/vendor/licenses/"} {
		if rec := get(t, http.MethodGet, path, nil); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, rec.Code)
		}
	}
	rec := get(t, http.MethodPost, "/", nil)
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
}

// TestSelfContained checks that the page loads nothing from elsewhere (it
// must work offline) and never parses strings as HTML: answers are model
// output.
func TestSelfContained(t *testing.T) {
	// The favicon's SVG names its XML namespace; that is not a fetch.
	external := regexp.MustCompile(`(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for _, name := range []string{"index.html", "app.js", "style.css"} {
		body, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(body), "http://www.w3.org/2000/svg", "")
		if m := external.FindString(text); m != "" {
			t.Errorf("%s refers to %s", name, m)
		}
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(text, sink) {
				t.Errorf("%s uses %s", name, sink)
			}
		}
	}
}

// TestVendorUnchanged checks that each vendored script is the released
// file refresh.sh recorded (by its sha256), that every file VERSIONS names
// ships with a licence, and that the page loads both before its own
// script.
func TestVendorUnchanged(t *testing.T) {
	versions, err := files.ReadFile("vendor/VERSIONS")
	if err != nil {
		t.Fatal(err)
	}
	scripts := 0
	for line := range strings.Lines(string(versions)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 5 || !strings.HasPrefix(f[4], "sha512-") {
			t.Fatalf("VERSIONS line %q: want file sha256 package@version path integrity", line)
		}
		body, err := files.ReadFile("vendor/" + f[0])
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != f[1] {
			t.Errorf("vendor/%s differs from %s's %s: run web/vendor/refresh.sh, never edit it", f[0], f[2], f[3])
		}
		pkg, _, _ := strings.Cut(f[2], "@")
		if matches, _ := fs.Glob(files, "vendor/licenses/"+pkg+"*.txt"); len(matches) == 0 {
			t.Errorf("no licence for %s in vendor/licenses", pkg)
		}
		scripts++
	}
	if scripts != 2 {
		t.Errorf("VERSIONS names %d files, want markdown-it's and DOMPurify's", scripts)
	}
	index, _ := files.ReadFile("index.html")
	order := regexp.MustCompile(`<script src="([^"]+)" defer></script>`).FindAllStringSubmatch(string(index), -1)
	var got []string
	for _, m := range order {
		got = append(got, m[1])
	}
	if want := "vendor/markdown-it.min.js vendor/purify.min.js app.js"; strings.Join(got, " ") != want {
		t.Errorf("index.html loads %v, want %s in that order", got, want)
	}
}
