package cli

import (
	"flag"
	"fmt"
	"time"

	"mspd/daemon"
	"mspd/provider/demo"
	msjs "mspd/store/jetstream"
)

// positiveFlags are the serve flags whose zero or negative value the
// daemon would silently replace by its default.
var positiveFlags = []string{
	"max-attempts", "max-frame-bytes", "queue-frames", "queue-bytes", "max-subscriptions", "write-timeout",
	"default-max-tokens", "retry-initial-backoff", "retry-max-backoff", "retry-max-server-delay",
	"retry-budget-ratio", "lease-ttl", "jetstream-replicas", "max-steps", "tool-timeout",
	"breaker-window", "breaker-cooldown",
}

// nonNegativeFlags are the serve flags where 0 means the default or none,
// and a negative value nothing.
var nonNegativeFlags = []string{"max-output-tokens", "shutdown-timeout", "demo-faults", "gc-headroom-mib", "approval-timeout"}

// nonZeroFlags are the serve flags where a negative value means off, and
// 0, which the daemon would silently take for its default, nothing: each
// with what to write instead.
var nonZeroFlags = map[string]string{
	"retry-budget-tokens": "want a positive bucket size, or negative for no budget",
	"command-retention":   "want a positive window, or negative for ever",
	"breaker-failures":    "want a positive count, or negative for no breakers",
}

// boundedFlags are the integer serve flags with a least and a greatest
// value.
var boundedFlags = map[string][2]int{
	"jetstream-streams": {1, msjs.MaxStreams},
}

// checkRanges refuses a serve flag value out of its range, naming the flag.
func checkRanges(fs *flag.FlagSet) error {
	for _, name := range positiveFlags {
		if sign(fs, name) <= 0 {
			return fmt.Errorf("--%s %s: want a positive value", name, fs.Lookup(name).Value)
		}
	}
	for _, name := range nonNegativeFlags {
		if sign(fs, name) < 0 {
			return fmt.Errorf("--%s %s: want zero or more", name, fs.Lookup(name).Value)
		}
	}
	for name, want := range nonZeroFlags {
		if sign(fs, name) == 0 {
			return fmt.Errorf("--%s %s: %s", name, fs.Lookup(name).Value, want)
		}
	}
	for name, r := range boundedFlags {
		if v := fs.Lookup(name).Value.(flag.Getter).Get().(int); v < r[0] || v > r[1] {
			return fmt.Errorf("--%s %d: want %d to %d", name, v, r[0], r[1])
		}
	}
	if f := fs.Lookup("demo-faults"); f.Value.(flag.Getter).Get().(float64) > 1 {
		return fmt.Errorf("--demo-faults %s: want a share of requests, 0..1", f.Value)
	}
	return nil
}

// zeroMeansNone gives the daemon "none" for the serve flags whose 0 says
// none but would be taken for the daemon's default: --demo-word-delay (no
// pause) and --retry-budget-refill (no refill).
func zeroMeansNone(cfg *daemon.Config) {
	if cfg.Demo.WordDelay == 0 {
		cfg.Demo.WordDelay = demo.NoDelay
	}
	if cfg.RetryBudget.Refill == 0 {
		cfg.RetryBudget.Refill = -1 // negative: none
	}
}

// sign is -1, 0 or 1 as a numeric flag's value is below, at or above 0.
func sign(fs *flag.FlagSet, name string) int {
	var v float64
	switch x := fs.Lookup(name).Value.(flag.Getter).Get().(type) {
	case int:
		v = float64(x)
	case int64:
		v = float64(x)
	case float64:
		v = x
	case time.Duration:
		v = float64(x)
	default:
		panic(fmt.Sprintf("flag --%s is not numeric", name))
	}
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
