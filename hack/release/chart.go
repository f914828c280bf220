package main

import (
	"bytes"
	"fmt"
	"path"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// packageChart packages the chart in dir into out, as helm package would, with its version and appVersion
// set to version and its default image repositories, the operator's and the node agent's, to prefix and
// the image's name; it returns the archive's path.
func packageChart(dir, version, prefix, out string) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, version
	// Helm writes values.yaml as it was read, comments and all, so the defaults are replaced in its text.
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		for _, repository := range []string{operatorRepository, agentRepository} {
			from := []byte("repository: " + repository + "\n")
			if bytes.Count(f.Data, from) != 1 {
				return "", fmt.Errorf("%s/%s does not set an image repository to %s, once", dir, f.Name, repository)
			}
			f.Data = bytes.Replace(f.Data, from, []byte("repository: "+prefix+"/"+path.Base(repository)+"\n"), 1)
		}
	}
	if err := ch.Validate(); err != nil {
		return "", err
	}
	return chartutil.Save(ch, out)
}
