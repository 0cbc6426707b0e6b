// Package shapes reduces an MSP schema bundle to a digest of its shapes:
// for each definition, its required members and a normalised type per
// property, or its openness and values for an enum; plus the definitions
// each method and notification refers to and the error registry.
//
// Digests of two bundles compare directly, which is how mspd checks its own
// schema against the upstream one without keeping the upstream file in the
// repository.
package shapes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Digest is the shape summary of one schema bundle.
type Digest struct {
	// SHA256 is the lowercase hex SHA-256 of the bundle's bytes.
	SHA256        string                `json:"sha256"`
	Defs          map[string]Def        `json:"defs"`
	Methods       map[string]MethodRefs `json:"methods"`
	Notifications map[string]MethodRefs `json:"notifications"`
	// Requests are the server-to-client requests (approval/request).
	Requests map[string]MethodRefs `json:"requests,omitempty"`
	Errors   []ErrorEntry          `json:"errors"`
}

// Def is the shape of one $defs entry.
type Def struct {
	// Kind is "object", "enum" or "other".
	Kind string `json:"kind"`
	// Required is the sorted required set of an object.
	Required []string `json:"required,omitempty"`
	// Properties maps each property of an object to its normalised type.
	Properties map[string]string `json:"properties,omitempty"`
	// Openness is an enum's x-msp-openness ("open" or "closed").
	Openness string `json:"openness,omitempty"`
	// Values are an enum's known values: enum for a closed enum, enum or
	// examples for an open one.
	Values []string `json:"values,omitempty"`
	// Type is the normalised type of any other definition.
	Type string `json:"type,omitempty"`
}

// MethodRefs are the normalised params and result types of a method
// ("ref:TurnStartParams"); "" when the method declares none.
type MethodRefs struct {
	Params string `json:"params,omitempty"`
	Result string `json:"result,omitempty"`
}

// ErrorEntry is one entry of the bundle's error registry.
type ErrorEntry struct {
	Code          int      `json:"code"`
	Kind          string   `json:"kind"`
	OverrideKinds []string `json:"overrideKinds,omitempty"`
	Retryable     *bool    `json:"retryable,omitempty"`
}

// FromBundle computes the digest of a schema bundle's bytes.
func FromBundle(bundle []byte) (*Digest, error) {
	var top struct {
		Defs          map[string]map[string]any `json:"$defs"`
		Methods       map[string]map[string]any `json:"methods"`
		Notifications map[string]map[string]any `json:"notifications"`
		Requests      map[string]map[string]any `json:"requests"`
		Errors        []ErrorEntry              `json:"errors"`
	}
	if err := json.Unmarshal(bundle, &top); err != nil {
		return nil, fmt.Errorf("shapes: %w", err)
	}
	sum := sha256.Sum256(bundle)
	d := &Digest{
		SHA256:        hex.EncodeToString(sum[:]),
		Defs:          make(map[string]Def, len(top.Defs)),
		Methods:       refsOf(top.Methods),
		Notifications: refsOf(top.Notifications),
		Requests:      refsOf(top.Requests),
		Errors:        top.Errors,
	}
	for name, s := range top.Defs {
		d.Defs[name] = defOf(s)
	}
	return d, nil
}

func refsOf(methods map[string]map[string]any) map[string]MethodRefs {
	out := make(map[string]MethodRefs, len(methods))
	for name, m := range methods {
		var r MethodRefs
		if p, ok := m["params"].(map[string]any); ok {
			r.Params = TypeOf(p)
		}
		if p, ok := m["result"].(map[string]any); ok {
			r.Result = TypeOf(p)
		}
		out[name] = r
	}
	return out
}

func defOf(s map[string]any) Def {
	if props, ok := s["properties"].(map[string]any); ok || s["type"] == "object" {
		d := Def{Kind: "object", Properties: make(map[string]string, len(props))}
		for name, p := range props {
			ps, _ := p.(map[string]any)
			d.Properties[name] = TypeOf(ps)
		}
		d.Required = stringList(s["required"])
		sort.Strings(d.Required)
		return d
	}
	if openness, ok := s["x-msp-openness"].(string); ok && s["type"] == "string" {
		values := stringList(s["enum"])
		if values == nil {
			values = stringList(s["examples"])
		}
		return Def{Kind: "enum", Openness: openness, Values: values}
	}
	return Def{Kind: "other", Type: TypeOf(s)}
}

// TypeOf normalises a property schema to a short type string:
// "string", "integer", "object", "any", "ref:SourceRange", "array<string>",
// "map<ref:X>" (an object with additionalProperties), and alternatives
// joined with "|" in sorted order with "null" last ("string|null",
// "ref:ForkProvenance|null"). Constraints such as pattern, minimum or enum
// do not change the type.
func TypeOf(s map[string]any) string {
	if ref, ok := s["$ref"].(string); ok {
		return "ref:" + ref[strings.LastIndex(ref, "/")+1:]
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[kw].([]any); ok {
			var parts []string
			for _, a := range alts {
				as, _ := a.(map[string]any)
				parts = append(parts, TypeOf(as))
			}
			return joinAlternatives(parts)
		}
	}
	switch t := s["type"].(type) {
	case string:
		return single(t, s)
	case []any:
		var parts []string
		for _, x := range t {
			if name, ok := x.(string); ok {
				parts = append(parts, single(name, s))
			}
		}
		return joinAlternatives(parts)
	}
	return "any"
}

func single(t string, s map[string]any) string {
	switch t {
	case "array":
		items, _ := s["items"].(map[string]any)
		if items == nil {
			return "array<any>"
		}
		return "array<" + TypeOf(items) + ">"
	case "object":
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			return "map<" + TypeOf(ap) + ">"
		}
	}
	return t
}

func joinAlternatives(parts []string) string {
	var alts []string
	null := false
	for _, p := range parts {
		for _, q := range splitTop(p) {
			if q == "null" {
				null = true
			} else {
				alts = append(alts, q)
			}
		}
	}
	sort.Strings(alts)
	alts = slices.Compact(alts)
	if null {
		alts = append(alts, "null")
	}
	return strings.Join(alts, "|")
}

// splitTop splits a normalised type at its top-level "|", leaving
// alternatives nested inside "<...>" alone.
func splitTop(t string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range t {
		switch r {
		case '<':
			depth++
		case '>':
			depth--
		case '|':
			if depth == 0 {
				parts = append(parts, t[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, t[start:])
}

// stringList converts a JSON array to strings; nil when v is not an array.
func stringList(v any) []string {
	arr, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(arr))
	for _, x := range arr {
		out = append(out, fmt.Sprint(x))
	}
	return out
}
