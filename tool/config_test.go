package tool_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"mspd/internal/testlog"
	"mspd/tool"
)

func TestServerConfigDecodesTheIssuesKeys(t *testing.T) {
	var file struct {
		MCP []tool.ServerConfig `toml:"mcp"`
	}
	md, err := toml.Decode(`
[[mcp]]
name = "files"
command = "files-mcp"
args = ["--root", "/srv/docs"]
env = { FILES_TOKEN = "tok" }
approval = "never"
approval_tools = ["delete"]

[[mcp]]
name = "search"
url = "http://127.0.0.1:9000/mcp"
headers = { Authorization = "Bearer x" }
`, &file)
	if err != nil {
		t.Fatal(err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		t.Fatalf("keys left undecoded: %v", u)
	}
	if err := tool.ValidateServers(file.MCP); err != nil {
		t.Fatal(err)
	}
	files, search := file.MCP[0], file.MCP[1]
	if files.Command != "files-mcp" || len(files.Args) != 2 || files.Env["FILES_TOKEN"] != "tok" || files.Transport() != "stdio" {
		t.Errorf("files: %+v", files)
	}
	if search.URL == "" || search.Headers["Authorization"] != "Bearer x" || search.Transport() != "http" {
		t.Errorf("search: %+v", search)
	}
	if files.NeedsApproval("read") || !files.NeedsApproval("delete") {
		t.Error("files: approval never, except delete")
	}
	if !search.NeedsApproval("anything") {
		t.Error("search: approval defaults to always")
	}
}

func TestServerConfigValidation(t *testing.T) {
	ok := tool.ServerConfig{Name: "files", Command: "files-mcp"}
	tests := []struct {
		name string
		edit func(*tool.ServerConfig)
		want string // in the error; "" for valid
	}{
		{"stdio", func(*tool.ServerConfig) {}, ""},
		{"http", func(c *tool.ServerConfig) { c.Command, c.URL = "", "https://mcp.example.com/mcp" }, ""},
		{"approval never", func(c *tool.ServerConfig) { c.Approval = "never" }, ""},
		{"approval always", func(c *tool.ServerConfig) { c.Approval = "always" }, ""},
		{"dotted tool", func(c *tool.ServerConfig) { c.ApprovalTools = []string{"fs.delete", "rm_rf", "x-y"} }, ""},
		{"words", func(c *tool.ServerConfig) { c.Name = "my_files-2" }, ""},
		{"no name", func(c *tool.ServerConfig) { c.Name = "" }, "no name"},
		{"double underscore", func(c *tool.ServerConfig) { c.Name = "my__files" }, "name must be"},
		{"trailing underscore", func(c *tool.ServerConfig) { c.Name = "files_" }, "name must be"},
		{"dot", func(c *tool.ServerConfig) { c.Name = "files.v2" }, "name must be"},
		{"long", func(c *tool.ServerConfig) { c.Name = strings.Repeat("a", 25) }, "name must be"},
		{"neither", func(c *tool.ServerConfig) { c.Command = "" }, "set command"},
		{"both", func(c *tool.ServerConfig) { c.URL = "http://h/mcp" }, "not both"},
		{"relative url", func(c *tool.ServerConfig) { c.Command, c.URL = "", "/mcp" }, "absolute http"},
		{"ftp url", func(c *tool.ServerConfig) { c.Command, c.URL = "", "ftp://h/mcp" }, "absolute http"},
		{"args with url", func(c *tool.ServerConfig) { c.Command, c.URL, c.Args = "", "http://h/mcp", []string{"-x"} }, "args and env"},
		{"env with url", func(c *tool.ServerConfig) { c.Command, c.URL, c.Env = "", "http://h/mcp", map[string]string{"K": "v"} }, "args and env"},
		{"headers with command", func(c *tool.ServerConfig) { c.Headers = map[string]string{"K": "v"} }, "headers are for a url"},
		{"bad env name", func(c *tool.ServerConfig) { c.Env = map[string]string{"A=B": "secret-value"} }, "invalid variable name"},
		{"bad header name", func(c *tool.ServerConfig) {
			c.Command, c.URL, c.Headers = "", "http://h/mcp", map[string]string{"X Bad": "secret-value"}
		}, "invalid header name"},
		{"approval vocabulary", func(c *tool.ServerConfig) { c.Approval = "sometimes" }, `not "sometimes"`},
		{"approval case", func(c *tool.ServerConfig) { c.Approval = "Never" }, "approval must be"},
		{"pattern", func(c *tool.ServerConfig) { c.ApprovalTools = []string{"delete*"} }, "names only"},
		{"empty tool", func(c *tool.ServerConfig) { c.ApprovalTools = []string{""} }, "names only"},
		{"model-facing name", func(c *tool.ServerConfig) { c.ApprovalTools = []string{"files/delete"} }, "names only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one with %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), "secret-value"):
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
	err := tool.ValidateServers([]tool.ServerConfig{ok, {Name: "other", URL: "http://h/mcp"}, ok})
	if err == nil || !strings.Contains(err.Error(), `"files": the name is used twice`) {
		t.Errorf("duplicate names: %v", err)
	}
}

func TestServerConfigPrintsNoSecret(t *testing.T) {
	configs := []tool.ServerConfig{
		{Name: "files", Command: "files-mcp", Env: map[string]string{"FILES_TOKEN": "env-secret"}},
		{Name: "web", URL: "https://user:url-pass@mcp.example.com/mcp?key=query-secret", Headers: map[string]string{"Authorization": "Bearer hdr-secret"}},
	}
	var logs testlog.Buffer
	log := logs.JSONLogger()
	for _, c := range configs {
		log.Info("configured", "server", c)
		log.Info("configured", slog.Any("server", c))
		for _, out := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), logs.String()} {
			for _, secret := range []string{"env-secret", "hdr-secret", "url-pass", "query-secret"} {
				if strings.Contains(out, secret) {
					t.Errorf("%q shows %s", out, secret)
				}
			}
		}
	}
	out := logs.String()
	for _, want := range []string{"FILES_TOKEN", "Authorization", "https://mcp.example.com/mcp", "files-mcp"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}
