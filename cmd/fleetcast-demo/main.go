// Command fleetcast-demo runs the whole fleetcast pipeline on this machine
// (see internal/demo). Start it with make demo, which starts the emulators
// and builds the control plane first:
//
//	make demo                 # until Ctrl-C
//	make demo DURATION=60s    # stops by itself and checks the result
//	make screenshots          # docs/dashboard.png and docs/dashboard-versions.png
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fleetcast/fleetcast/internal/cli"
	"github.com/fleetcast/fleetcast/internal/demo"
)

func main() { cli.Main("fleetcast-demo", run) }

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleetcast-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 0, "stop after this long and check that every cluster's fleets arrived (0: until Ctrl-C)")
	shots := fs.String("screenshots", "", "write the dashboard's screenshots ("+demo.DashboardPNG+", "+demo.VersionsPNG+") into this directory; needs a --duration of 40s or more")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *shots != "" && *duration < 40*time.Second {
		return fmt.Errorf("--screenshots needs --duration=40s or more (it shoots 15 s after everything runs), got %v", *duration)
	}
	interactive := false
	if f, ok := stdout.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 && *duration == 0 {
			interactive = true
		}
	}
	return demo.Run(ctx, demo.Options{Duration: *duration, Out: stdout, Interactive: interactive, ModuleDir: ".", Screenshots: *shots})
}
