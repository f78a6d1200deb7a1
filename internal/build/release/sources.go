package release

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"sigs.k8s.io/yaml"
)

// Where the sources say a release's version.
const (
	ChartFile          = "publisher/chart/Chart.yaml"
	AllocatorChartFile = "cmd/fleetcast-allocator/chart/Chart.yaml"
	KustomizationFile  = "publisher/deploy/kustomization.yaml"
	ChangelogFile      = "CHANGELOG.md"
)

// CheckSources refuses to release version from a tree that says another:
// the charts' version and appVersion (the images' tag), the
// kustomization's image tag, and a section of the changelog,
// "## [X.Y.Z] - YYYY-MM-DD" (docs/releasing.md, step 1), must all be the
// release's, so that the CLI, the images, the chart and the changelog of
// one release carry one number. Each mismatch is named, with its file.
func CheckSources(moduleDir, version string) error {
	if err := Check(version); err != nil {
		return err
	}
	v := ChartVersion(version)
	var errs []error
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(moduleDir, name))
		if err != nil {
			errs = append(errs, err)
		}
		return b
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	for _, file := range []string{ChartFile, AllocatorChartFile} {
		if b := read(file); b != nil {
			if err := yaml.Unmarshal(b, &chart); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", file, err))
			} else if chart.Version != v || chart.AppVersion != v {
				errs = append(errs, fmt.Errorf("%s: version %q, appVersion %q: set both to %q", file, chart.Version, chart.AppVersion, v))
			}
		}
	}
	var kust struct {
		Images []struct {
			Name   string `json:"name"`
			NewTag string `json:"newTag"`
		} `json:"images"`
	}
	if b := read(KustomizationFile); b != nil {
		if err := yaml.Unmarshal(b, &kust); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", KustomizationFile, err))
		} else if len(kust.Images) == 0 {
			errs = append(errs, fmt.Errorf("%s: no images: want the publisher's, newTag %q", KustomizationFile, v))
		}
		for _, im := range kust.Images {
			if im.NewTag != v {
				errs = append(errs, fmt.Errorf("%s: image %s newTag %q: set it to %q", KustomizationFile, im.Name, im.NewTag, v))
			}
		}
	}
	if b := read(ChangelogFile); b != nil {
		section := regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(v) + `\] - \d{4}-\d{2}-\d{2}$`)
		if !section.Match(b) {
			errs = append(errs, fmt.Errorf("%s: no section \"## [%s] - YYYY-MM-DD\": move the [Unreleased] entries under it", ChangelogFile, v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release %s: the sources say otherwise (docs/releasing.md):\n%w", version, err)
	}
	return nil
}
