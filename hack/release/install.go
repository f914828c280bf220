package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomize renders the kustomization at dir in fsys, as `kubectl apply -k` would.
func kustomize(fsys filesys.FileSystem, dir string) ([]byte, error) {
	opts := krusty.MakeDefaultOptions()
	// Namespaces and CRDs first, as kubectl apply -k sorts them, so that kubectl apply -f of the output works
	// on an empty cluster.
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(fsys, dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}

// renderInstall renders config/default (below root) with the operator's image set to repository:tag: the
// namespace, the CRD, the RBAC, the Deployment and the metrics Service that dist/install.yaml holds. It
// works on a copy of config/ in memory, beside an overlay that sets the image, so the checkout is not
// touched.
func renderInstall(root, repository, tag string) ([]byte, error) {
	fsys, err := configInMemory(root)
	if err != nil {
		return nil, err
	}
	overlay := fmt.Sprintf("resources:\n  - ../config/default\nimages:\n  - name: %s\n    newName: %s\n    newTag: %q\n",
		operatorRepository, repository, tag)
	if err := fsys.WriteFile("/release/kustomization.yaml", []byte(overlay)); err != nil {
		return nil, err
	}
	return kustomize(fsys, "/release")
}

// configInMemory copies root's config/ folder into an in-memory file system, at /config.
func configInMemory(root string) (filesys.FileSystem, error) {
	fsys := filesys.MakeFsInMemory()
	base := filepath.Join(root, "config")
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fsys.WriteFile(filepath.Join("/config", rel), data)
	})
	return fsys, err
}
