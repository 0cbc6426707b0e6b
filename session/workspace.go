package session

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"mspd/schema/msp"
)

// checkWorkspaceRoots refuses session/start workspace roots that are not
// absolute paths on this host, or that climb with "..": the schema says
// absolute, and a root such as "../../etc" names no folder of its own.
// When both workspaceRoot and workspaceRoots are given, the first root
// must name the same folder as workspaceRoot (compared cleaned), as the
// upstream schema requires. Whether the folder exists is not checked:
// mspd runs no tools in it, and answering would let a principal probe
// the server's filesystem.
func checkWorkspaceRoots(p msp.SessionStartParams) error {
	if p.WorkspaceRoot != "" {
		if err := checkWorkspacePath("workspaceRoot", p.WorkspaceRoot); err != nil {
			return err
		}
	}
	for i, root := range p.WorkspaceRoots {
		if err := checkWorkspacePath(fmt.Sprintf("workspaceRoots.%d", i), root); err != nil {
			return err
		}
	}
	if p.WorkspaceRoot != "" && len(p.WorkspaceRoots) > 0 && filepath.Clean(p.WorkspaceRoot) != filepath.Clean(p.WorkspaceRoots[0]) {
		return msp.ErrInvalidParams("workspaceRoots", "workspaceRoots.0 must name the same folder as workspaceRoot")
	}
	return nil
}

// checkWorkspacePath refuses a path that is relative or has a ".." element.
func checkWorkspacePath(field, path string) error {
	if !filepath.IsAbs(path) {
		return msp.ErrInvalidParams(field, "%s must be an absolute path", field)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "..") {
		return msp.ErrInvalidParams(field, "%s must not contain \"..\" elements", field)
	}
	return nil
}
