package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
)

// pricedConfig writes a configuration of an OpenAI provider "oa" (model
// gpt-test) falling back on an Anthropic provider "claude", each with
// the prices given (empty: none), and returns its path.
func pricedConfig(t *testing.T, oaURL, anURL, oaPrices, claudePrices string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mspd.toml")
	conf := fmt.Sprintf(`default = "oa"
[[providers]]
id = "oa"
type = "openai"
base_url = %q
model = "gpt-test"
api_key_env = "TEST_KEY"
fallback = ["claude"]
%s
[[providers]]
id = "claude"
type = "anthropic"
base_url = %q
model = %q
api_key_env = "TEST_ANTHROPIC_KEY"
%s
`, oaURL, oaPrices, anURL, anthropictest.Model, claudePrices)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// modelCosts are model/list's cost per provider/model, as JSON.
func modelCosts(t *testing.T, c *checkedClient) map[string]string {
	t.Helper()
	var res msp.ModelListResult
	if err := c.Call(testCtx(t), msp.MethodModelList, struct{}{}, &res); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range res.Models {
		b, _ := json.Marshal(m.Cost)
		out[m.ProviderID+"/"+m.ModelID] = string(b)
	}
	return out
}

// usagesOf decodes the session/tokenUsage events among events.
func usagesOf(t *testing.T, events []client.Notification) []msp.SessionTokenUsageParams {
	var out []msp.SessionTokenUsageParams
	for _, n := range only(events, msp.NotifySessionTokenUsage) {
		out = append(out, decode[msp.SessionTokenUsageParams](t, n))
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestCostOverTheWire: prices in --config reach model/list as cost; each
// completion's session/tokenUsage carries its costUsd at the price of the
// model that answered — cached prompt tokens at the cached price, a
// fallback's at the fallback's — and cumulative.cost sums them. After a
// restart whose configuration drops the OpenAI price, the session's cost
// goes on from the log's: the next, unpriced completion leaves the sum and
// marks it partial; view/page reads back every event as it was sent live.
func TestCostOverTheWire(t *testing.T) {
	oa := openaitest.New(t, "/v1",
		openaitest.Stream(openaitest.Role(), openaitest.Delta("cheap"), openaitest.Finish("stop"), openaitest.Usage(1000, 100, 400, 20), openaitest.Done),
		openaitest.Error(429, openaitest.QuotaBody),
		openaitest.Stream(openaitest.Answer("again")...))
	an := anthropictest.New(t, anthropictest.AnswerUsage(2000, 50, "from Claude"))
	dir := t.TempDir()
	oaPrices := "price_in = 2\nprice_out = 8\nprice_cached_in = 0.5\n"
	claudePrices := "price_in = 3\nprice_out = 15\n"
	cfg := daemon.Config{DataDir: dir, Env: chainEnv, ConfigFile: pricedConfig(t, oa.URL(), an.URL(), oaPrices, claudePrices)}
	d := startDaemon(t, cfg)
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)

	costs := modelCosts(t, c)
	if want := `{"cached":"0.5","currency":"USD","input":"2","output":"8"}`; costs["oa/gpt-test"] != want {
		t.Errorf("model/list cost of oa/gpt-test %s, want %s", costs["oa/gpt-test"], want)
	}
	if want := `{"cached":"3","currency":"USD","input":"3","output":"15"}`; costs["claude/"+anthropictest.Model] != want {
		t.Errorf("model/list cost of claude %s, want %s", costs["claude/"+anthropictest.Model], want)
	}

	sid := newSession(t, c)
	ev1, done1 := answerTurn(t, c, sid, "first")
	ev2, done2 := answerTurn(t, c, sid, "second") // oa's quota is spent: claude answers
	if done1.Terminal != msp.TerminalCompleted || done2.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminals %s, %s", done1.Terminal, done2.Terminal)
	}
	u1, u2 := usagesOf(t, ev1), usagesOf(t, ev2)
	if len(u1) != 1 || len(u2) != 1 {
		t.Fatalf("session/tokenUsage events: %d and %d, want one a turn", len(u1), len(u2))
	}
	first, second := u1[0], u2[0]
	leg1 := (600*2 + 400*0.5 + 100*8) / 1e6 // 600 fresh prompt tokens, 400 cached, 100 out (20 of them reasoning)
	if first.TurnID != done1.TurnID || first.CostUSD == nil || !near(*first.CostUSD, leg1) ||
		first.Cumulative.Cost == nil || first.Cumulative.Cost.USD != *first.CostUSD || first.Cumulative.Cost.Partial {
		t.Errorf("first turn's usage %s: want costUsd %v, the cumulative cost the same, not partial", bodyJSON(t, first), leg1)
	}
	leg2 := float64(second.PromptTokens*3+second.Usage.OutputTokens*15) / 1e6
	if second.ModelID != anthropictest.Model || second.TurnID != done2.TurnID || second.PromptTokens != 2000 ||
		second.CostUSD == nil || !near(*second.CostUSD, leg2) ||
		second.Cumulative.Cost == nil || second.Cumulative.Cost.USD != *first.CostUSD+*second.CostUSD || second.Cumulative.Cost.Partial {
		t.Errorf("the fallback's usage %s: want costUsd %v at claude's price, cumulative the sum", bodyJSON(t, second), leg2)
	}

	// The next process prices oa no more.
	d.Close(ctx)
	cfg.ConfigFile = pricedConfig(t, oa.URL(), an.URL(), "", claudePrices)
	d2 := startDaemon(t, cfg)
	c2 := dial(t, d2.URL(), client.Options{})
	if got := modelCosts(t, c2)["oa/gpt-test"]; got != "null" {
		t.Errorf("model/list cost of an unpriced model: %s", got)
	}
	if _, err := c2.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	ev3, done3 := answerTurn(t, c2, sid, "third")
	u3 := usagesOf(t, ev3)
	if len(u3) != 1 || u3[0].CostUSD != nil || u3[0].Cumulative.Cost == nil ||
		u3[0].Cumulative.Cost.USD != second.Cumulative.Cost.USD || !u3[0].Cumulative.Cost.Partial ||
		u3[0].Cumulative.TotalTokens != second.Cumulative.TotalTokens+u3[0].TotalTokens || done3.Terminal != msp.TerminalCompleted {
		t.Errorf("after the restart, an unpriced completion's usage %s: want no costUsd, the cost carried on (%v) and partial",
			bodyJSON(t, u3), second.Cumulative.Cost.USD)
	}

	var page msp.ViewPageResult
	if err := c2.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 1000}, &page); err != nil {
		t.Fatal(err)
	}
	var logged []msp.SessionTokenUsageParams
	for _, e := range page.Events {
		if e.Method == msp.NotifySessionTokenUsage {
			var p msp.SessionTokenUsageParams
			if err := json.Unmarshal(e.Params, &p); err != nil {
				t.Fatal(err)
			}
			logged = append(logged, p)
		}
	}
	live := []msp.SessionTokenUsageParams{first, second, u3[0]}
	if len(logged) != len(live) {
		t.Fatalf("view/page holds %d session/tokenUsage events, want %d", len(logged), len(live))
	}
	for i := range live {
		if a, b := bodyJSON(t, logged[i].Cumulative), bodyJSON(t, live[i].Cumulative); a != b {
			t.Errorf("event %d: the log's cumulative %s, live %s", i, a, b)
		}
	}
}
