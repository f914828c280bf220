package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestPrometheusRuleMatchesRulesFile: the PrometheusRule for the Prometheus Operator carries the same rule
// groups as the plain rules file that promtool checks and tests (make test-rules).
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	read := func(name string) map[string]any {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("prometheus", name))
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return doc
	}
	plain := read("rules.yaml")["groups"]
	rule := read("prometheusrule.yaml")
	spec, _ := rule["spec"].(map[string]any)
	if rule["kind"] != "PrometheusRule" || spec == nil {
		t.Fatalf("prometheusrule.yaml is not a PrometheusRule with a spec: %v", rule)
	}
	if plain == nil || !reflect.DeepEqual(spec["groups"], plain) {
		t.Errorf("prometheusrule.yaml's spec.groups differ from rules.yaml's groups")
	}
}
