// Package web serves mspd's chat page: a small MSP client in plain HTML,
// JavaScript and CSS that talks to /msp on the page's own host. Its script
// is ES modules in js/ (main.js imports the others), which browsers load
// as they are: the files are embedded, so the page needs no build step and
// works offline. Its
// Markdown renderer (markdown-it), sanitizer (DOMPurify) and code
// highlighter (highlight.js) are released npm files kept unchanged in
// vendor/, with their licences and versions; vendor/refresh.sh replaces
// them.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"time"
)

//go:embed index.html js/*.js style.css vendor/*.js vendor/VERSIONS vendor/licenses/*.txt
var files embed.FS

// csp allows the page its own files, inline data images (the favicon, and
// the images of messages, which the page makes data: URLs of) and
// WebSocket connections to its own host, and nothing else: no inline
// script or style, so markup that slipped into an answer could not run.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	name        string
	body        []byte
	contentType string
	etag        string
}

// contentTypes maps the embedded files' extensions to their types. Module
// scripts need a JavaScript type: browsers refuse a module served as
// anything else (and nosniff makes them check it for classic scripts too).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".txt":  "text/plain; charset=utf-8",
	"":      "text/plain; charset=utf-8", // vendor/VERSIONS
}

// assets maps request paths to files: every embedded file at its own
// path, and the page also at /.
var assets = func() map[string]asset {
	m := map[string]asset{}
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		m["/"+name] = asset{name: name, body: body, contentType: contentTypes[path.Ext(name)],
			etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("web: " + err.Error()) // embedded: cannot happen
	}
	m["/"] = m["/index.html"]
	return m
}()

// Handler serves the chat page at / with its script modules (under /js/),
// style sheet and vendored libraries (and their licences under
// /vendor/licenses/). Any other path is not found. Responses carry an ETag
// and Cache-Control: no-cache, so browsers revalidate and pick up a new
// mspd at once.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a, ok := assets[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	// The page URL may carry ?token=: keep it out of Referer headers.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", csp)
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
}
