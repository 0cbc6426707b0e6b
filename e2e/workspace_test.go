package e2e

import (
	"errors"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
)

// TestWorkspaceRootMustBeAbsolute: session/start with a relative
// workspace root, or one that climbs with "..", is refused with a typed
// invalidParams naming the field, makes no session, and leaves the
// connection serving; absolute roots are taken and reported.
func TestWorkspaceRootMustBeAbsolute(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	for _, tc := range []struct {
		name   string
		params msp.SessionStartParams
		field  string
	}{
		{"climbing", msp.SessionStartParams{WorkspaceRoot: "../../etc"}, "workspaceRoot"},
		{"relative", msp.SessionStartParams{WorkspaceRoot: "src/project"}, "workspaceRoot"},
		{"absolute but climbing", msp.SessionStartParams{WorkspaceRoot: "/home/me/../../etc"}, "workspaceRoot"},
		{"a relative root in the set", msp.SessionStartParams{WorkspaceRoots: []string{"/home/me/src", "lib"}}, "workspaceRoots.1"},
		{"a climbing first root", msp.SessionStartParams{WorkspaceRoots: []string{"/srv/../etc"}}, "workspaceRoots.0"},
		{"the set naming another folder", msp.SessionStartParams{WorkspaceRoot: "/home/me/src", WorkspaceRoots: []string{"/home/me/other"}}, "workspaceRoots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.params.CommandID = client.NewCommandID()
			err := c.Call(ctx, msp.MethodSessionStart, tc.params, nil)
			var me *msp.Error
			if !errors.As(err, &me) || me.Code != msp.CodeInvalidParams || me.Data.Kind != msp.KindInvalidParams {
				t.Fatalf("session/start: %v, want invalidParams", err)
			}
			if me.Data.Details["field"] != tc.field {
				t.Errorf("details %v, want field %q (%s)", me.Data.Details, tc.field, me.Message)
			}
		})
	}
	if ids := listed(t, ctx, c); len(ids) != 0 {
		t.Errorf("refused starts made sessions: %v", ids)
	}

	for _, p := range []msp.SessionStartParams{
		{WorkspaceRoot: "/home/me/src"},
		{WorkspaceRoots: []string{"/home/me/src", "/home/me/lib"}},
		{WorkspaceRoot: "/home/me/src/", WorkspaceRoots: []string{"/home/me/src"}},
	} {
		p.CommandID = client.NewCommandID()
		var res msp.SessionStartResult
		if err := c.Call(ctx, msp.MethodSessionStart, p, &res); err != nil {
			t.Fatalf("session/start %+v: %v", p, err)
		}
		if res.Session.WorkspaceRoot == nil || !strings.HasPrefix(*res.Session.WorkspaceRoot, "/home/me/src") {
			t.Errorf("session/start %+v reports workspaceRoot %v", p, res.Session.WorkspaceRoot)
		}
	}
}
