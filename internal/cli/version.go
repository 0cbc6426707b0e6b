package cli

import (
	"runtime/debug"
)

// version is mspd's version: set at link time for a release
// (-ldflags "-X mspd/internal/cli.version=v1.2.3"), otherwise the module's version from
// the build information, or "dev" with the commit the binary was built
// from (and "-dirty" when the tree had changes).
var version = ""

// buildVersion is the version this binary reports: on --version, as
// initialize's serverInfo.version and in its userAgent.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	v := "dev+" + rev[:min(len(rev), 12)]
	if dirty {
		v += "-dirty"
	}
	return v
}
