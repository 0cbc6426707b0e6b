package web

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
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

// modules are the page's script modules, as embedded (js/main.js, …).
func modules(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(files, "js/*.js")
	if err != nil || len(names) == 0 {
		t.Fatalf("no modules embedded under js/: %v", err)
	}
	return names
}

func TestServesFiles(t *testing.T) {
	want := map[string]string{
		"/":            "text/html; charset=utf-8",
		"/index.html":  "text/html; charset=utf-8",
		"/js/main.js":  "text/javascript; charset=utf-8",
		"/js/state.js": "text/javascript; charset=utf-8",
		"/style.css":   "text/css; charset=utf-8",

		"/vendor/markdown-it.min.js":                  "text/javascript; charset=utf-8",
		"/vendor/purify.min.js":                       "text/javascript; charset=utf-8",
		"/vendor/highlight.min.js":                    "text/javascript; charset=utf-8",
		"/vendor/licenses/highlightjs-cdn-assets.txt": "text/plain; charset=utf-8",
		"/vendor/VERSIONS":                            "text/plain; charset=utf-8",
		"/vendor/licenses/markdown-it.txt":            "text/plain; charset=utf-8",
		"/vendor/licenses/dompurify-MPL-2.0.txt":      "text/plain; charset=utf-8",
	}
	// Every module, with a JavaScript type: browsers refuse a module
	// script of any other.
	for _, name := range modules(t) {
		want["/"+name] = "text/javascript; charset=utf-8"
	}
	for path, want := range want {
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
	etag := get(t, http.MethodGet, "/js/main.js", nil).Header().Get("ETag")
	rec := get(t, http.MethodGet, "/js/main.js", http.Header{"If-None-Match": {etag}})
	if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Errorf("revalidation: %d with %d bytes, want 304 and none", rec.Code, rec.Body.Len())
	}
	if rec := get(t, http.MethodHead, "/", nil); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD /: %d with %d bytes", rec.Code, rec.Body.Len())
	}
}

func TestRefuses(t *testing.T) {
	for _, path := range []string{"/web.go", "/app.js", "/js/main.js/", "/js/", "/js", "/main.js", "/../go.mod",
		"/favicon.ico", "/static/js/main.js", "/vendor/", "/vendor/refresh.sh", "/vendor/licenses/"} {
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
	for _, name := range append([]string{"index.html", "style.css"}, modules(t)...) {
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
		pkg, _ := splitSpec(f[2])
		if matches, _ := fs.Glob(files, "vendor/licenses/"+licenceName(pkg)+"*.txt"); len(matches) == 0 {
			t.Errorf("no licence for %s in vendor/licenses", pkg)
		}
		scripts++
	}
	if scripts != 3 {
		t.Errorf("VERSIONS names %d files, want markdown-it's, DOMPurify's and highlight.js's", scripts)
	}
	// Deferred classic scripts and module scripts run in document order,
	// once the page is parsed: the libraries' globals are there before
	// main.js and what it imports run.
	index, _ := files.ReadFile("index.html")
	order := regexp.MustCompile(`<script[^>]*>`).FindAllString(string(index), -1)
	want := []string{
		`<script src="vendor/markdown-it.min.js" defer>`,
		`<script src="vendor/purify.min.js" defer>`,
		`<script src="vendor/highlight.min.js" defer>`,
		`<script type="module" src="js/main.js">`,
	}
	if !slices.Equal(order, want) {
		t.Errorf("index.html loads %q, want %q in that order", order, want)
	}
}

// splitSpec splits a VERSIONS package@version, a scoped name's leading @
// included in the name.
func splitSpec(spec string) (pkg, version string) {
	i := strings.LastIndex(spec, "@")
	if i <= 0 {
		return spec, ""
	}
	return spec[:i], spec[i+1:]
}

// licenceName is the file name refresh.sh gives a package's licence: a
// scoped package's without its @ and with - for /.
func licenceName(pkg string) string {
	return strings.ReplaceAll(strings.TrimPrefix(pkg, "@"), "/", "-")
}

// TestRefreshPinsVersions checks that VERSIONS records the versions
// refresh.sh pins, so that running it without "latest" gives back the
// files web embeds; a hand-edited pin or VERSIONS fails here.
func TestRefreshPinsVersions(t *testing.T) {
	script, err := os.ReadFile("vendor/refresh.sh")
	if err != nil {
		t.Fatal(err)
	}
	pins := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)=([0-9][0-9A-Za-z.+-]*)$`).FindAllStringSubmatch(string(script), -1) {
		pins[m[2]] = true
	}
	versions, err := files.ReadFile("vendor/VERSIONS")
	if err != nil {
		t.Fatal(err)
	}
	shipped := 0
	for line := range strings.Lines(string(versions)) {
		f := strings.Fields(line)
		if strings.HasPrefix(line, "#") || len(f) < 3 {
			continue
		}
		shipped++
		pkg, version := splitSpec(f[2])
		if !pins[version] {
			t.Errorf("VERSIONS ships %s@%s, a version refresh.sh does not pin (it pins %v)", pkg, version, pins)
		}
		if !strings.Contains(string(script), `"`+pkg+"@$") {
			t.Errorf("refresh.sh does not fetch %s", pkg)
		}
	}
	if shipped != len(pins) {
		t.Errorf("refresh.sh pins %d versions, VERSIONS ships %d files", len(pins), shipped)
	}
}

// TestPolicyForbidsInlineScript checks that the page's scripts are all
// files of its own: the Content Security Policy allows scripts from the
// page's origin only (modules included), no inline ones, and index.html
// has none.
func TestPolicyForbidsInlineScript(t *testing.T) {
	policy := get(t, http.MethodGet, "/", nil).Header().Get("Content-Security-Policy")
	var script string
	for d := range strings.SplitSeq(policy, ";") {
		if f := strings.Fields(d); len(f) > 0 && f[0] == "script-src" {
			script = strings.Join(f[1:], " ")
		}
	}
	if script != "'self'" {
		t.Errorf("script-src %q, want 'self' alone (policy %q)", script, policy)
	}
	index, _ := files.ReadFile("index.html")
	for _, tag := range regexp.MustCompile(`(?s)<script\b[^>]*>(.*?)</script>`).FindAllStringSubmatch(string(index), -1) {
		if !strings.Contains(tag[0], ` src="`) || strings.TrimSpace(tag[1]) != "" {
			t.Errorf("index.html has an inline script: %s", tag[0])
		}
	}
}

// importRE finds the module specifiers of static imports and re-exports
// (`import {a} from './a.js'`, `import './b.js'`, `export {c} from
// './c.js'`), over several lines too, and dynamic import() calls.
var importRE = regexp.MustCompile(`\b(?:import|export)\s*(?:[\w$*{},\s]*?\bfrom\s*)?['"]([^'"\n]+)['"]|\bimport\s*\(`)

// TestModuleImportsResolve checks that every import of every module names
// a module the handler serves as JavaScript (a relative path: the page has
// no import map, so a bare name would not load), that every module is
// reached from main.js, and that the modules import no cycle (the few
// calls up the graph are set in main.js instead).
func TestModuleImportsResolve(t *testing.T) {
	graph := map[string][]string{}
	for _, name := range modules(t) {
		body, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		graph[name] = []string{}
		for _, m := range importRE.FindAllStringSubmatch(string(body), -1) {
			spec := m[1]
			if spec == "" {
				t.Errorf("%s: a dynamic import(): import modules statically, so this test can check them", name)
				continue
			}
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
				t.Errorf("%s imports %q: not a relative path", name, spec)
				continue
			}
			target := path.Join(path.Dir(name), spec)
			rec := get(t, http.MethodGet, "/"+target, nil)
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/javascript; charset=utf-8" {
				t.Errorf("%s imports %q: GET /%s is %d %q, want a served module", name, spec, target, rec.Code, rec.Header().Get("Content-Type"))
				continue
			}
			graph[name] = append(graph[name], target)
		}
	}
	if len(graph["js/main.js"]) == 0 {
		t.Fatal("js/main.js imports nothing: is it still the page's entry?")
	}
	// Depth-first from main.js: grey while on the path (a cycle if met
	// again), black once done.
	const grey, black = 1, 2
	color := map[string]int{}
	var visit func(n string, path []string)
	visit = func(n string, path []string) {
		color[n] = grey
		for _, m := range graph[n] {
			switch color[m] {
			case grey:
				t.Errorf("import cycle: %s → %s", strings.Join(path, " → "), m)
			case 0:
				visit(m, append(path, m))
			}
		}
		color[n] = black
	}
	visit("js/main.js", []string{"js/main.js"})
	for name := range graph {
		if color[name] == 0 {
			t.Errorf("%s is embedded but no module imports it from main.js", name)
		}
	}
}
