package session

import (
	"fmt"
	"log/slog"
	"testing"
)

// The package's tests fail on a phase move phaseMoves does not list.
func init() { strictPhases = true }

// TestPhaseMoves: every move between two phases is allowed or refused as
// the lifecycle in doc.go draws it, and enter makes exactly the allowed
// ones (a refused one panics under the tests).
func TestPhaseMoves(t *testing.T) {
	allowed := map[[2]phase]bool{
		{phaseLoading, phaseLive}:          true,
		{phaseLoading, phaseHalfErased}:    true,
		{phaseLive, phaseUnsettled}:        true,
		{phaseLive, phaseErasing}:          true,
		{phaseLive, phaseHalfErased}:       true,
		{phaseLive, phaseErased}:           true,
		{phaseUnsettled, phaseLive}:        true,
		{phaseUnsettled, phaseUnsettled}:   true,
		{phaseUnsettled, phaseErasing}:     true,
		{phaseUnsettled, phaseHalfErased}:  true,
		{phaseUnsettled, phaseErased}:      true,
		{phaseErasing, phaseLive}:          true,
		{phaseErasing, phaseHalfErased}:    true,
		{phaseErasing, phaseErased}:        true,
		{phaseHalfErased, phaseLive}:       true,
		{phaseHalfErased, phaseHalfErased}: true,
		{phaseHalfErased, phaseErased}:     true,
		{phaseErased, phaseHalfErased}:     true,
		{phaseErased, phaseErased}:         true,
	}
	// Among the refused, those a careless change would most likely make.
	for _, refused := range [][2]phase{
		{phaseErased, phaseLive},          // nothing brings an erased session back
		{phaseErased, phaseErasing},       // erasing it again keeps it erased
		{phaseHalfErased, phaseErasing},   // a deletion sent again must still reach it
		{phaseHalfErased, phaseUnsettled}, // it is not whole to begin with
		{phaseErasing, phaseErasing},      // one erasure at a time (session.erasing)
		{phaseLoading, phaseErasing},      // nobody sees a session loading
		{phaseLoading, phaseErased},
		{phaseLive, phaseLoading},
		{phaseLive, phaseLive},
	} {
		if allowed[refused] {
			t.Fatalf("the test lists %s → %s as both allowed and refused", refused[0], refused[1])
		}
	}
	for from := phaseLoading; from <= phaseErased; from++ {
		for to := phaseLoading; to <= phaseErased; to++ {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				want := allowed[[2]phase{from, to}]
				if got := from.may(to); got != want {
					t.Fatalf("may = %v, want %v", got, want)
				}
				s := &session{id: "s", phase: from, m: &Manager{log: slog.New(slog.DiscardHandler)}}
				panicked := func() (p bool) {
					defer func() { p = recover() != nil }()
					s.enter(to)
					return false
				}()
				if panicked == want {
					t.Fatalf("enter panicked = %v, want %v", panicked, !want)
				}
				if want && s.phase != to {
					t.Fatalf("phase after enter = %s, want %s", s.phase, to)
				}
			})
		}
	}
}

// TestPhaseDeleted: the phases a deletion has reached are exactly those
// nothing more is written in.
func TestPhaseDeleted(t *testing.T) {
	for p, want := range map[phase]bool{
		phaseLoading: false, phaseLive: false, phaseUnsettled: false,
		phaseErasing: true, phaseHalfErased: true, phaseErased: true,
	} {
		if got := p.deleted(); got != want {
			t.Errorf("%s.deleted() = %v, want %v", p, got, want)
		}
	}
	if got := phase(99).String(); got != "phase(99)" {
		t.Errorf("an unknown phase reads %q", got)
	}
}
