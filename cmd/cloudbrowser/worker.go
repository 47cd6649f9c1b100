package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/worker"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
	"github.com/cloudbrowser-go/cloudbrowser/worker/grade"
)

// workerDefaults are the worker flags' defaults.
var workerDefaults = worker.DefaultConfig()

func workerCmd() *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "run a worker: hosts app instances and their virtual browsers",
		Description: `A worker connects to the master (retrying until it is up), joins the gossip layer,
registers, and serves the app instances the master places on it. Proxies forward
end users' requests to its --listen address.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "master", Value: workerDefaults.Master, Sources: cli.EnvVars("CB_MASTER"),
				Usage: "the master's RMI address"},
			secretFileFlag,
			&cli.StringFlag{Name: "listen", Value: workerDefaults.Listen, Sources: cli.EnvVars("CB_LISTEN"),
				Usage: "HTTP address proxies forward to (port 0 = any free port)"},
			&cli.StringFlag{Name: "advertise", Sources: cli.EnvVars("CB_ADVERTISE"),
				Usage: "host:port the proxies dial to reach --listen (a name or an address of this host); required when --listen binds every interface (:8000, 0.0.0.0:8000, [::]:8000); default: the --listen address"},
			&cli.StringFlag{Name: "socket-url", Sources: cli.EnvVars("CB_SOCKET_URL"),
				Usage: "public address of a cluster proxy on this worker's host (e.g. https://w2.example.com): client engines open their WebSockets there, with a one-time ticket, so a worker on another host than the proxy that served the page is reached without a relay; default: the page's own address"},
			&cli.StringFlag{Name: "id", Sources: cli.EnvVars("CB_WORKER_ID"),
				Usage: "worker id: " + ids.WorkerRule + ` (default: random, "w-" + 8 characters)`},
			&cli.StringFlag{Name: "runtime", Value: "chromium", Sources: cli.EnvVars("CB_RUNTIME"),
				Usage: `virtual browser runtime: "chromium", or "none" (keeps page state, renders nothing; for tests)`},
			&cli.IntFlag{Name: "max-browsers", Value: workerDefaults.MaxBrowsers, Sources: cli.EnvVars("CB_MAX_BROWSERS"),
				Usage: "the worker's global browser limit (general pool and app-specific pools together)"},
			&cli.IntFlag{Name: "job-slots", Value: 0, Sources: cli.EnvVars("CB_JOB_SLOTS"),
				Usage: "render and check jobs this worker runs at once (0 = a quarter of --max-browsers, at least 1)"},
			&cli.BoolFlag{Name: "job-browser-reuse", Value: true, Sources: cli.EnvVars("CB_JOB_BROWSER_REUSE"),
				Usage: "reset a general-pool browser after a job and lend it to the next (cookies, storage, cache, permissions, pages cleared; docs/jobs.md lists what a reset cannot clear); false: a new browser per job"},
			&cli.IntFlag{Name: "general-pool-min", Value: workerDefaults.GeneralMin, Sources: cli.EnvVars("CB_GENERAL_POOL_MIN"),
				Usage: "blank browsers kept ready in the general pool for the next first visits (-1 = from memory: one per GiB available, at most 2)"},
			&cli.Int64Flag{Name: "max-app-bytes", Value: 0, Sources: cli.EnvVars("CB_MAX_APP_BYTES"),
				Usage: "largest application bundle (uncompressed bytes) this worker keeps in memory; 0 = no limit of its own (the master's 64 MiB)"},
			&cli.DurationFlag{Name: "snapshot-interval", Value: workerDefaults.SnapshotInterval, Sources: cli.EnvVars("CB_SNAPSHOT_INTERVAL"),
				Usage: "how often, at most, a browser in use is snapshotted at the master for failover (also after each navigation)"},
			&cli.DurationFlag{Name: "rest-after", Value: workerDefaults.RestAfter, Sources: cli.EnvVars("CB_REST_AFTER"),
				Usage: "how long a browser goes without a client before its page rests (hidden, scripts running, less memory); the next client wakes it; 0 = never"},
			&cli.DurationFlag{Name: "frame-latency-high", Value: workerDefaults.Grade.High, Sources: cli.EnvVars("CB_FRAME_LATENCY_HIGH"),
				Usage: "input→frame latency (p90 over a second, inside the worker) above which screencast frames get a step smaller: a worker short of CPU sends smaller frames rather than later ones"},
			&cli.DurationFlag{Name: "frame-latency-low", Value: workerDefaults.Grade.Low, Sources: cli.EnvVars("CB_FRAME_LATENCY_LOW"),
				Usage: "input→frame latency under which, held for 3 s, frames get a step larger again"},
			&cli.FloatFlag{Name: "frame-scale-min", Value: workerDefaults.Grade.MinScale, Sources: cli.EnvVars("CB_FRAME_SCALE_MIN"),
				Usage: "smallest screencast frame scale, in (0, 1]; 1 = always full size"},
			&cli.DurationFlag{Name: "frame-sharpen", Value: workerDefaults.Grade.Sharpen, Sources: cli.EnvVars("CB_FRAME_SHARPEN"),
				Usage: "how long a page shown by a smaller frame rests before a full-size frame shows it sharp"},
			&cli.BoolFlag{Name: "frame-tiles", Value: true, Sources: cli.EnvVars("CB_FRAME_TILES"),
				Usage: "send client engines that compose them only the changed 64×64 tiles of a frame (damage updates, docs/client-engine.md \"Tiles\") instead of whole frames: a typing viewer gets about 1/13 of the bytes for ~2 ms of worker CPU per frame; false: whole frames to every engine"},
			&cli.FloatFlag{Name: "render-scale", Value: 1, Sources: cli.EnvVars("CB_RENDER_SCALE"),
				Usage: "fraction of a page's pixels Chromium draws, in [0.25, 1]: at 0.5 a 1280×720 page is sent as 640×360 frames, always, for about 0.7× the CPU per frame (more typing users per worker, less bandwidth, less sharp); captures stay full size"},
			&cli.BoolFlag{Name: "automation", Value: true, Sources: cli.EnvVars("CB_AUTOMATION"),
				Usage: "take automation clients (CDP: Playwright, Puppeteer, chromedp) on the master's sessions, through a DevTools port each Chromium opens on 127.0.0.1 (any local process can reach it: turn off on shared hosts)"},
			&cli.StringFlag{Name: "chromium", Sources: cli.EnvVars("CB_CHROMIUM"),
				Usage: "Chromium binary (default: the headless shell, chromium-headless-shell, else chromium, chromium-browser or google-chrome on PATH)"},
			&cli.IntFlag{Name: "chromium-processes", Value: 1, Sources: cli.EnvVars("CB_CHROMIUM_PROCESSES"),
				Usage: "Chromium processes per worker; virtual browsers are spread over them"},
			&cli.IntFlag{Name: "renderer-process-limit", Sources: cli.EnvVars("CB_RENDERER_PROCESS_LIMIT"),
				Usage: "Chromium --renderer-process-limit (0 = Chromium's default); see docs/chromium.md"},
			&cli.StringSliceFlag{Name: "egress-allow", Sources: cli.EnvVars("CB_EGRESS_ALLOW"),
				Usage: "destination the virtual browsers may reach although the egress guard refuses it by default (repeatable): an address, prefix or host name with an optional port, e.g. 10.0.0.0/8 or intranet.example:443; the cluster's own ports stay refused"},
			&cli.BoolFlag{Name: "no-handoff", Sources: cli.EnvVars("CB_NO_HANDOFF"),
				Usage: "take no WebSockets handed over by proxies on this host (they relay them instead): for a worker in its own network namespace or container that shares the file system with a proxy"},
			&cli.StringSliceFlag{Name: "chromium-flag", Sources: cli.EnvVars("CB_CHROMIUM_FLAGS"),
				Usage: "extra Chromium command-line flag (repeatable), e.g. --chromium-flag=--js-flags=--max-old-space-size=64"},
		}, memberFlags()...),
		Action: withSecret(func(ctx context.Context, cmd *cli.Command, log zerolog.Logger, sec string) error {
			if n := cmd.Int("max-browsers"); n < 1 {
				return fmt.Errorf("--max-browsers must be at least 1, got %d", n)
			}
			if d := cmd.Duration("snapshot-interval"); d < 100*time.Millisecond { // snapshots are writes at the master
				return fmt.Errorf("--snapshot-interval must be at least 100ms, got %s", d)
			}
			gossipAdv, err := workerAddresses(ctx, cmd)
			if err != nil {
				return err
			}
			rt, err := newRuntime(ctx, cmd, log)
			if err != nil {
				return err
			}
			w, err := worker.New(worker.Config{
				ID: cmd.String("id"), Secret: sec, Master: cmd.String("master"),
				Listen: cmd.String("listen"), Advertise: cmd.String("advertise"),
				GossipAddr: cmd.String("gossip"), GossipAdvertise: gossipAdv,
				Runtime: rt, Logger: log, Version: version,
				MaxBrowsers: int(cmd.Int("max-browsers")), GeneralMin: int(cmd.Int("general-pool-min")),
				EgressAllow: cmd.StringSlice("egress-allow"), MaxAppBytes: cmd.Int64("max-app-bytes"),
				SnapshotInterval: cmd.Duration("snapshot-interval"),
				RestAfter:        cmd.Duration("rest-after"),
				Grade: grade.Config{High: cmd.Duration("frame-latency-high"), Low: cmd.Duration("frame-latency-low"),
					MinScale: cmd.Float("frame-scale-min"), Sharpen: cmd.Duration("frame-sharpen")},
				JobSlots:   int(cmd.Int("job-slots")),
				NoJobReuse: !cmd.Bool("job-browser-reuse"),
				SocketURL:  cmd.String("socket-url"),
				NoHandoff:  cmd.Bool("no-handoff"),
				FrameTiles: cmd.Bool("frame-tiles"),
			})
			if err != nil {
				rt.Close()
				return err
			}
			if err := w.Start(ctx); err != nil {
				w.Close()
				return err
			}
			if err := writeReady(cmd, "worker", map[string]string{"http": w.HTTPAddr()}); err != nil {
				w.Close()
				return err
			}
			<-ctx.Done()
			log.Info().Msg("stopping")
			return w.Close()
		}),
	}
}

func newRuntime(ctx context.Context, cmd *cli.Command, log zerolog.Logger, extraFlags ...string) (browser.Runtime, error) {
	switch r := cmd.String("runtime"); r {
	case "none":
		return &browser.Null{}, nil
	case "chromium":
		if n := cmd.Int("chromium-processes"); n < 1 {
			return nil, fmt.Errorf("--chromium-processes must be at least 1, got %d", n)
		}
		if n := cmd.Int("renderer-process-limit"); n < 0 {
			return nil, fmt.Errorf("--renderer-process-limit must be >= 0, got %d", n)
		}
		rt, err := chromium.New(ctx, chromium.Config{
			Path: cmd.String("chromium"), Processes: int(cmd.Int("chromium-processes")),
			RendererProcessLimit: int(cmd.Int("renderer-process-limit")),
			RenderScale:          cmd.Float("render-scale"),
			DevTools:             cmd.Bool("automation"),
			ExtraFlags:           append(cmd.StringSlice("chromium-flag"), extraFlags...), Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("--runtime chromium: %w", err)
		}
		return rt, nil
	default:
		return nil, fmt.Errorf("--runtime %q: must be chromium or none", r)
	}
}
