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

// operatorRepository is the operator image's repository in config/manager and the chart's values;
// agentRepository the agent's, in config/nodeagent and the chart's values (nodeAgent.image).
const (
	operatorRepository = "ghcr.io/consumergroup-operator/consumergroup-operator"
	agentRepository    = "ghcr.io/consumergroup-operator/consumergroup-agent"
)

// programs are the images a release ships: the binary's name in bin/, the image's, and where it runs from.
var programs = []struct{ Binary, Image, Entrypoint string }{
	{"manager", "consumergroup-operator", "/manager"},
	{"consumergroup-agent", "consumergroup-agent", "/consumergroup-agent"},
}

// releaseFlags are the command line's flags; each command reads those it names.
type releaseFlags struct {
	root, out, version, prefix, bin, arch, revision, created, platforms, downloadURL string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release images|manifests [flags]")
		os.Exit(2)
	}
	var f releaseFlags
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&f.root, "root", "../..", "the checkout")
	fs.StringVar(&f.out, "out", "../../dist", "where to write")
	fs.StringVar(&f.version, "version", "", "the release's version, e.g. 0.1.0; the images' tag")
	fs.StringVar(&f.prefix, "repository-prefix", filepath.Dir(operatorRepository), "the images' repository, less the program's name")
	fs.StringVar(&f.bin, "bin", "", "images: the folder holding the static linux binaries")
	fs.StringVar(&f.arch, "arch", "amd64", "images: the binaries' GOARCH")
	fs.StringVar(&f.revision, "revision", "", "images: the commit")
	fs.StringVar(&f.created, "created", "", "images, plugin: the commit's time (RFC 3339), every timestamp in the archives")
	fs.StringVar(&f.platforms, "platforms", "linux/amd64", "plugin: the OS/ARCH pairs, comma-separated, whose binaries are in -bin/OS-ARCH")
	fs.StringVar(&f.downloadURL, "download-url", "", "plugin: where the archives are published (default: the release's page)")
	_ = fs.Parse(os.Args[2:])
	if f.version == "" {
		fatal(fmt.Errorf("-version is required"))
	}
	fatal(os.MkdirAll(f.out, 0o755))
	switch os.Args[1] {
	case "images":
		releaseImages(f)
	case "manifests":
		releaseManifests(f)
	case "plugin":
		releasePlugin(f)
	default:
		fatal(fmt.Errorf("unknown command %q: images, manifests or plugin", os.Args[1]))
	}
}

// releaseImages writes one image tarball per program.
func releaseImages(f releaseFlags) {
	t, err := time.Parse(time.RFC3339, f.created)
	fatal(err)
	for _, p := range programs {
		ref, err := name.NewTag(f.prefix + "/" + p.Image + ":" + f.version)
		fatal(err)
		img, err := buildImage(imageSpec{Title: p.Image, Binary: filepath.Join(f.bin, p.Binary), Entrypoint: p.Entrypoint,
			Arch: f.arch, Version: f.version, Revision: f.revision, Created: t})
		fatal(err)
		path := filepath.Join(f.out, p.Image+".tar")
		fatal(writeImage(path, ref, img))
		digest, err := img.Digest()
		fatal(err)
		fmt.Printf("%s: %s %s\n", path, ref, digest)
	}
}

// releaseManifests writes install.yaml and the chart's package.
func releaseManifests(f releaseFlags) {
	repository := f.prefix + "/consumergroup-operator"
	manifest, err := renderInstall(f.root, repository, f.version)
	fatal(err)
	path := filepath.Join(f.out, "install.yaml")
	fatal(os.WriteFile(path, manifest, 0o644))
	fmt.Println(path)
	chart, err := packageChart(filepath.Join(f.root, "charts", "consumergroup-operator"), f.version, f.prefix, f.out)
	fatal(err)
	fmt.Println(chart)
}

// releasePlugin writes kubectl-cg's archives and its krew manifest.
func releasePlugin(f releaseFlags) {
	t, err := time.Parse(time.RFC3339, f.created)
	fatal(err)
	archives, err := packPlugin(f.bin, strings.Split(f.platforms, ","), t, f.out)
	fatal(err)
	url := f.downloadURL
	if url == "" {
		url = source + "/releases/download/v" + f.version
	}
	path := filepath.Join(f.out, "kubectl-cg.yaml")
	fatal(writeKrewManifest(path, f.version, url, archives))
	for _, a := range archives {
		fmt.Println(filepath.Join(f.out, a.File))
	}
	fmt.Println(path)
}

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
