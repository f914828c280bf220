// Command release builds what a release ships, from a checkout and the static binaries make built:
//
//	release images    -bin DIR -arch ARCH -version V -revision SHA -created TIME -repository-prefix P -out DIR
//	release manifests -version V -repository-prefix P -out DIR
//	release plugin    -bin DIR -platforms OS/ARCH,... -version V -created TIME -download-url URL -out DIR
//
// images writes one tarball per program (operator and agent), loadable by docker load, kind load
// image-archive and ctr images import; manifests writes install.yaml (kustomize's config/default with the
// versioned image) and the Helm chart's package; plugin writes kubectl-cg's archives and its krew
// manifest. make images and make release run it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// operatorRepository is the operator image's repository in config/manager and the chart's values.
const operatorRepository = "ghcr.io/consumergroup-operator/consumergroup-operator"

// programs are the images a release ships: the binary's name in bin/, the image's, and where it runs from.
var programs = []struct{ Binary, Image, Entrypoint string }{
	{"manager", "consumergroup-operator", "/manager"},
	{"consumergroup-agent", "consumergroup-agent", "/consumergroup-agent"},
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release images|manifests [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	root := fs.String("root", "../..", "the checkout")
	out := fs.String("out", "../../dist", "where to write")
	version := fs.String("version", "", "the release's version, e.g. 0.1.0; the images' tag")
	prefix := fs.String("repository-prefix", filepath.Dir(operatorRepository), "the images' repository, less the program's name")
	bin := fs.String("bin", "", "images: the folder holding the static linux binaries")
	arch := fs.String("arch", "amd64", "images: the binaries' GOARCH")
	revision := fs.String("revision", "", "images: the commit")
	created := fs.String("created", "", "images, plugin: the commit's time (RFC 3339), every timestamp in the archives")
	platforms := fs.String("platforms", "linux/amd64", "plugin: the OS/ARCH pairs, comma-separated, whose binaries are in -bin/OS-ARCH")
	downloadURL := fs.String("download-url", "", "plugin: where the archives are published (default: the release's page)")
	_ = fs.Parse(os.Args[2:])
	if *version == "" {
		fatal(fmt.Errorf("-version is required"))
	}
	fatal(os.MkdirAll(*out, 0o755))
	switch os.Args[1] {
	case "images":
		t, err := time.Parse(time.RFC3339, *created)
		fatal(err)
		for _, p := range programs {
			ref, err := name.NewTag(*prefix + "/" + p.Image + ":" + *version)
			fatal(err)
			img, err := buildImage(imageSpec{Title: p.Image, Binary: filepath.Join(*bin, p.Binary), Entrypoint: p.Entrypoint,
				Arch: *arch, Version: *version, Revision: *revision, Created: t})
			fatal(err)
			path := filepath.Join(*out, p.Image+".tar")
			fatal(writeImage(path, ref, img))
			digest, err := img.Digest()
			fatal(err)
			fmt.Printf("%s: %s %s\n", path, ref, digest)
		}
	case "manifests":
		repository := *prefix + "/consumergroup-operator"
		manifest, err := renderInstall(*root, repository, *version)
		fatal(err)
		path := filepath.Join(*out, "install.yaml")
		fatal(os.WriteFile(path, manifest, 0o644))
		fmt.Println(path)
		chart, err := packageChart(filepath.Join(*root, "charts", "consumergroup-operator"), *version, repository, *out)
		fatal(err)
		fmt.Println(chart)
	case "plugin":
		t, err := time.Parse(time.RFC3339, *created)
		fatal(err)
		archives, err := packPlugin(*bin, strings.Split(*platforms, ","), t, *out)
		fatal(err)
		url := *downloadURL
		if url == "" {
			url = source + "/releases/download/v" + *version
		}
		path := filepath.Join(*out, "kubectl-cg.yaml")
		fatal(writeKrewManifest(path, *version, url, archives))
		for _, a := range archives {
			fmt.Println(filepath.Join(*out, a.File))
		}
		fmt.Println(path)
	default:
		fatal(fmt.Errorf("unknown command %q: images, manifests or plugin", os.Args[1]))
	}
}

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
