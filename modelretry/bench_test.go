package modelretry

import (
	"net/http"
	"testing"
	"time"
)

func BenchmarkClassify(b *testing.B) {
	sigs := []struct {
		name string
		sig  Signal
	}{
		{"status", Signal{HTTPStatus: 503}},
		{"seconds+shouldRetry", Signal{HTTPStatus: 429, Header: http.Header{"Retry-After": {"2"}, "X-Should-Retry": {"true"}}}},
		{"httpDate", Signal{HTTPStatus: 429, Header: http.Header{"Retry-After": {testNow.Add(time.Minute).Format(http.TimeFormat)}}}},
		{"message", Signal{HTTPStatus: 429, Message: "Rate limit reached. Please try again in 1.2s."}},
	}
	for _, s := range sigs {
		sig := s.sig
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Classify(sig, testNow)
			}
		})
	}
}

func BenchmarkDelay(b *testing.B) {
	p := DefaultPolicy()
	r := fixed(0.5)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		p.Delay(n%8, r)
		n++
	}
}
