package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
)

// TestMakeRelease runs make release as a user would, twice, and reads back what it wrote: the images
// load with the versioned tag and the checkout's commit, install.yaml runs that image, the chart carries
// the version, and the second run wrote the same images and install.yaml, byte for byte. (The chart's
// package is not compared: helm stamps its archive with the time it was written.)
func TestMakeRelease(t *testing.T) {
	const version = "0.0.1-test"
	revision, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	must(t, err)
	var dists []string
	for range 2 {
		dist := t.TempDir()
		cmd := exec.Command("make", "-C", root, "release", "VERSION="+version, "DIST="+dist, "REPOSITORY_PREFIX=registry.example/cg")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make release: %v\n%s", err, out)
		}
		dists = append(dists, dist)
	}
	for _, f := range []string{"consumergroup-operator.tar", "consumergroup-agent.tar", "install.yaml"} {
		a, err := os.ReadFile(filepath.Join(dists[0], f))
		must(t, err)
		b, err := os.ReadFile(filepath.Join(dists[1], f))
		must(t, err)
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs of make release on the same commit", f)
		}
	}
	dist := dists[0]

	for _, p := range programs {
		ref, err := name.NewTag("registry.example/cg/" + p.Image + ":" + version)
		must(t, err)
		img, err := tarball.ImageFromPath(filepath.Join(dist, p.Image+".tar"), &ref)
		if err != nil {
			t.Fatalf("%s.tar holds no %s: %v", p.Image, ref, err)
		}
		cf, err := img.ConfigFile()
		must(t, err)
		if got := cf.Config.Labels["org.opencontainers.image.revision"]; got != strings.TrimSpace(string(revision)) {
			t.Errorf("%s: revision label %q, want the checkout's %s", p.Image, got, revision)
		}
	}

	install, err := os.ReadFile(filepath.Join(dist, "install.yaml"))
	must(t, err)
	objs := decodeAll(t, install)
	if len(objs) == 0 || objs[0].GetKind() != "Namespace" {
		t.Errorf("install.yaml does not start with its Namespace, so kubectl apply -f would fail on an empty cluster")
	}
	var dep appsv1.Deployment
	for _, d := range find(objs, "Deployment") {
		as(t, d, &dep)
	}
	if got, want := dep.Spec.Template.Spec.Containers[0].Image, "registry.example/cg/consumergroup-operator:"+version; got != want {
		t.Errorf("install.yaml runs %q, want %q", got, want)
	}

	ch, err := loader.Load(filepath.Join(dist, "consumergroup-operator-"+version+".tgz"))
	must(t, err)
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != version {
		t.Errorf("the chart's version %s, appVersion %s, want %s", ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
}
