package shapes

import (
	"encoding/json"
	"testing"
)

func TestTypeOf(t *testing.T) {
	for _, tt := range []struct{ schema, want string }{
		{`{"type":"string","pattern":"^x$"}`, "string"},
		{`{"type":"integer","minimum":1}`, "integer"},
		{`{"type":["string","null"]}`, "string|null"},
		{`{"type":["null","string"]}`, "string|null"},
		{`{"type":["integer","string"]}`, "integer|string"},
		{`{"$ref":"#/$defs/SourceRange"}`, "ref:SourceRange"},
		{`{"anyOf":[{"$ref":"#/$defs/ForkProvenance"},{"type":"null"}]}`, "ref:ForkProvenance|null"},
		{`{"anyOf":[{"type":"array","items":{"$ref":"#/$defs/Item"}},{"type":"null"}]}`, "array<ref:Item>|null"},
		{`{"type":"array","items":{"type":["string","null"]}}`, "array<string|null>"},
		{`{"type":"object","properties":{}}`, "object"},
		{`{"type":"object","additionalProperties":{"type":"string"}}`, "map<string>"},
		{`{"type":"array"}`, "array<any>"},
		{`{}`, "any"},
	} {
		var s map[string]any
		if err := json.Unmarshal([]byte(tt.schema), &s); err != nil {
			t.Fatal(err)
		}
		if got := TypeOf(s); got != tt.want {
			t.Errorf("TypeOf(%s) = %q, want %q", tt.schema, got, tt.want)
		}
	}
}

func TestFromBundle(t *testing.T) {
	bundle := []byte(`{
	  "$defs": {
	    "Obj": {"type": "object", "required": ["b", "a"], "properties": {"a": {"type": "string"}, "b": {"$ref": "#/$defs/Open"}}},
	    "Open": {"type": "string", "x-msp-openness": "open", "examples": ["x", "y"]},
	    "Closed": {"type": "string", "x-msp-openness": "closed", "enum": ["p"]},
	    "Id": {"type": ["integer", "string"]}
	  },
	  "methods": {"m": {"params": {"$ref": "#/$defs/Obj"}, "result": {"$ref": "#/$defs/Obj"}}},
	  "notifications": {"n": {}},
	  "errors": [{"code": -1, "kind": "k", "retryable": true}]
	}`)
	d, err := FromBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(d.Defs)
	want := `{"Closed":{"kind":"enum","openness":"closed","values":["p"]},"Id":{"kind":"other","type":"integer|string"},` +
		`"Obj":{"kind":"object","required":["a","b"],"properties":{"a":"string","b":"ref:Open"}},` +
		`"Open":{"kind":"enum","openness":"open","values":["x","y"]}}`
	if string(got) != want {
		t.Errorf("defs:\n got %s\nwant %s", got, want)
	}
	if d.Methods["m"] != (MethodRefs{Params: "ref:Obj", Result: "ref:Obj"}) || d.Notifications["n"] != (MethodRefs{}) {
		t.Errorf("methods %+v, notifications %+v", d.Methods, d.Notifications)
	}
	if len(d.Errors) != 1 || d.Errors[0].Kind != "k" || d.Errors[0].Retryable == nil || !*d.Errors[0].Retryable {
		t.Errorf("errors %+v", d.Errors)
	}
	if len(d.SHA256) != 64 {
		t.Errorf("sha256 %q", d.SHA256)
	}
}
