package modelretry_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
)

// instant is a Clock whose sleeps end at once, so the example runs fast.
type instant struct{}

func (instant) Now() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
func (instant) Sleep(ctx context.Context, _ time.Duration) error {
	return ctx.Err()
}

// A model call whose first request is rate limited, whose second is
// overloaded, and whose third succeeds.
func Example() {
	engine := &modelretry.Engine{Clock: instant{}, Budget: modelretry.DefaultBudget(), Rand: retrytest.Fixed(0.5)}
	host := modelretry.DefaultPolicy()
	call, err := engine.Start(host.WithMaxAttempts(3, host.MaxAttempts))
	if err != nil {
		panic(err)
	}
	failures := []modelretry.Signal{
		{HTTPStatus: 429, Header: http.Header{"Retry-After": {"2"}}},
		{HTTPStatus: 529, Header: http.Header{"X-Should-Retry": {"true"}}},
	}
	ctx := context.Background()
	for {
		a, err := call.Begin(ctx)
		if err != nil {
			panic(err)
		}
		if a.N() > len(failures) {
			a.Succeed()
			fmt.Printf("attempt %d succeeded; attempts.count=%d\n", a.N(), call.Attempts())
			return
		}
		d := a.Fail(ctx, engine.Classify(failures[a.N()-1]))
		if !d.Retry {
			fmt.Println("gave up:", d.Stop, d.Failure.Kind)
			return
		}
		err = call.Backoff(ctx, func(d modelretry.Decision) error {
			fmt.Printf("turn/modelRetryScheduled attempt %d/%d next %d in %dms (%s)\n",
				d.Attempt, d.MaxAttempts, d.NextAttempt, d.Delay.Milliseconds(), d.Failure.Kind)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// turn/modelRetryScheduled attempt 1/3 next 2 in 2000ms (rateLimited)
	// turn/modelRetryScheduled attempt 2/3 next 3 in 500ms (overloaded)
	// attempt 3 succeeded; attempts.count=3
}
