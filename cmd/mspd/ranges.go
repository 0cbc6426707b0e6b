package main

import (
	"flag"
	"fmt"
	"time"
)

// positiveFlags are the serve flags whose zero or negative value the
// daemon would silently replace by its default.
var positiveFlags = []string{
	"max-attempts", "max-frame-bytes", "queue-frames", "queue-bytes", "write-timeout",
	"default-max-tokens", "retry-initial-backoff", "retry-max-backoff", "retry-max-server-delay",
	"retry-budget-ratio", "lease-ttl",
}

// nonNegativeFlags are the serve flags where 0 means the default or none,
// and a negative value nothing.
var nonNegativeFlags = []string{"max-output-tokens", "idle-timeout", "shutdown-timeout", "demo-faults"}

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
	if f := fs.Lookup("demo-faults"); f.Value.(flag.Getter).Get().(float64) > 1 {
		return fmt.Errorf("--demo-faults %s: want a share of requests, 0..1", f.Value)
	}
	return nil
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
