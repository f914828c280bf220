package config

import (
	"os"
	"regexp"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// TestCRDDescribesEveryCondition checks that the CRD's description of status.conditions, what kubectl
// explain shows, names every condition type the operator sets (v1alpha1.ConditionTypes).
func TestCRDDescribesEveryCondition(t *testing.T) {
	raw, err := os.ReadFile("crd/bases/messaging.consumergroup.io_consumergroups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Status struct {
								Properties struct {
									Conditions struct{ Description string }
								}
							}
						}
					} `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) == 0 {
		t.Fatal("the CRD has no version")
	}
	for _, v := range crd.Spec.Versions {
		doc := v.Schema.OpenAPIV3Schema.Properties.Status.Properties.Conditions.Description
		for _, c := range v1alpha1.ConditionTypes {
			if !regexp.MustCompile(`\b` + c + `\b`).MatchString(doc) {
				t.Errorf("%s: status.conditions' description does not name the condition %s:\n%s", v.Name, c, doc)
			}
		}
	}
}
