package daemon

import (
	"encoding/json"
	"testing"

	"mspd/provider/catalog"
)

func ptr[T any](v T) *T { return &v }

// TestModelListCost: model/list fills cost on the rows whose model has a
// price — the numbers verbatim as decimals, the cached price defaulting
// to the input price, USD — and leaves it null on the others.
func TestModelListCost(t *testing.T) {
	cat, err := catalog.Build(catalog.File{Providers: []catalog.Entry{
		{ID: "paid", Type: catalog.TypeScripted, Model: "small", Models: []string{"small", "big", "free"},
			ModelSettings: catalog.ModelSettings{PriceIn: ptr(0.15), PriceOut: ptr(0.6)},
			Overrides: []catalog.Override{
				{Model: "big", ModelSettings: catalog.ModelSettings{PriceIn: ptr(2.5), PriceOut: ptr(10.0), PriceCachedIn: ptr(1.25)}},
				{Model: "free", ModelSettings: catalog.ModelSettings{PriceIn: ptr(0.0), PriceOut: ptr(0.0)}},
			}},
		{ID: "local", Type: catalog.TypeScripted, Model: "m"},
	}}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range (models{Catalog: cat}).List("", "").Models {
		b, _ := json.Marshal(e.Cost)
		got[e.ProviderID+"/"+e.ModelID] = string(b)
	}
	want := map[string]string{
		"paid/small": `{"cached":"0.15","currency":"USD","input":"0.15","output":"0.6"}`,
		"paid/big":   `{"cached":"1.25","currency":"USD","input":"2.5","output":"10"}`,
		"paid/free":  `{"cached":"0","currency":"USD","input":"0","output":"0"}`,
		"local/m":    `null`,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: cost %s, want %s", k, got[k], w)
		}
	}
}
