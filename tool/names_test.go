package tool_test

import (
	"regexp"
	"strings"
	"testing"

	"mspd/tool"
)

var providerName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestModelName(t *testing.T) {
	tests := []struct{ server, tool, want string }{
		{"files", "read", "files__read"},
		{"files", "read_file", "files__read_file"},
		{"my_files", "x-y", "my_files__x-y"},
		{"a", "_b", "a___b"},
		// Outside the charset or too long: spelled, cut, and hashed.
		{"files", "fs.read", "files__fs_read_"},
		{"files", "lire_été", "files__lire__t__"},
		{"files", strings.Repeat("t", 70), "files__" + strings.Repeat("t", 48) + "_"},
	}
	for _, tt := range tests {
		got := tool.ModelName(tt.server, tt.tool)
		if !providerName.MatchString(got) {
			t.Errorf("%s/%s: %q is outside the providers' charset", tt.server, tt.tool, got)
		}
		if strings.HasSuffix(tt.want, "_") {
			if !strings.HasPrefix(got, tt.want) || len(got) != len(tt.want)+8 {
				t.Errorf("%s/%s: %q, want %q and 8 hex digits", tt.server, tt.tool, got, tt.want)
			}
		} else if got != tt.want {
			t.Errorf("%s/%s: %q, want %q", tt.server, tt.tool, got, tt.want)
		}
		if again := tool.ModelName(tt.server, tt.tool); again != got {
			t.Errorf("%s/%s: %q then %q", tt.server, tt.tool, got, again)
		}
	}
	// Pairs that a plain join or a plain substitution would confuse.
	pairs := [][2]string{
		{"a", "b__c"}, {"a_b", "c"}, {"a", "_b"}, {"a", "b"},
		{"files", "fs.read"}, {"files", "fs-read"}, {"files", "fs_read"}, {"files", "fs/read"},
		{"files", strings.Repeat("t", 70)}, {"files", strings.Repeat("t", 71)},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		n := tool.ModelName(p[0], p[1])
		if q, dup := seen[n]; dup {
			t.Errorf("%v and %v share %q", p, q, n)
		}
		seen[n] = p
	}
}
