package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
)

var (
	jobDefaults   = jobs.DefaultConfig()
	cacheDefaults = rendercache.DefaultConfig()
)

// jobFlags configure the job queue and the render cache (docs/jobs.md).
func jobFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "jobs-allow", Sources: cli.EnvVars("CB_JOBS_ALLOW"),
			Usage: "addresses jobs may reach although loopback/private/link-local (e.g. 127.0.0.1:8000, 10.0.0.0/8); metadata addresses never"},
		&cli.IntFlag{Name: "job-concurrency", Value: jobDefaults.Defaults.Concurrent, Sources: cli.EnvVars("CB_JOB_CONCURRENCY"),
			Usage: "jobs running at once per host (per resolved address:port; aliases share it)"},
		&cli.FloatFlag{Name: "job-rate", Value: jobDefaults.Defaults.StartsPerSec, Sources: cli.EnvVars("CB_JOB_RATE"),
			Usage: "job starts per second per host"},
		&cli.DurationFlag{Name: "job-class-interval", Value: jobDefaults.Defaults.Interval, Sources: cli.EnvVars("CB_JOB_CLASS_INTERVAL"),
			Usage: "least time between two job starts on one host"},
		&cli.StringFlag{Name: "job-classes", Sources: cli.EnvVars("CB_JOB_CLASSES"),
			Usage: `JSON file of class rules: [{"pattern":"*.example.com","class":"example","limits":{"concurrent":4,"startsPerSec":2}}]`},
		&cli.DurationFlag{Name: "job-report-every", Value: jobDefaults.ReportEvery, Sources: cli.EnvVars("CB_JOB_REPORT_EVERY"),
			Usage: "how often workers report a running job; an attempt silent for twice that is retried elsewhere"},
		&cli.IntFlag{Name: "job-max-attempts", Value: jobDefaults.MaxAttempts, Sources: cli.EnvVars("CB_JOB_MAX_ATTEMPTS"),
			Usage: "attempts of one job before it fails"},
		&cli.IntFlag{Name: "job-queue-max", Value: jobDefaults.LeftoverMax, Sources: cli.EnvVars("CB_JOB_QUEUE_MAX"),
			Usage: "bound of the leftover queue; submissions over it get 429"},
		&cli.IntFlag{Name: "job-queue-count", Value: jobDefaults.QueueCount, Sources: cli.EnvVars("CB_JOB_QUEUE_COUNT"),
			Usage: "per-host queues at once (url-server Queue_Count); jobs of more hosts wait in the leftover queue"},
		&cli.IntFlag{Name: "job-queue-len", Value: jobDefaults.QueueLen, Sources: cli.EnvVars("CB_JOB_QUEUE_LEN"),
			Usage: "jobs in one per-host queue (url-server Queue_Len); more wait in the leftover queue"},
		&cli.DurationFlag{Name: "render-cache-max-age", Value: cacheDefaults.DefaultMaxAge, Sources: cli.EnvVars("CB_RENDER_CACHE_MAX_AGE"),
			Usage: "a cached render older than this is regenerated (per request: maxAgeMs)"},
		&cli.Int64Flag{Name: "render-cache-max-bytes", Value: cacheDefaults.MaxBytes, Sources: cli.EnvVars("CB_RENDER_CACHE_MAX_BYTES"),
			Usage: "bound of the render cache; least recently used renders are evicted"},
	}
}

// jobConfig reads the job flags; errors name the flag.
func jobConfig(cmd *cli.Command) (jobs.Config, rendercache.Config, error) {
	jc := jobs.DefaultConfig()
	jc.AllowAddrs = cmd.StringSlice("jobs-allow")
	jc.Defaults.Concurrent = int(cmd.Int("job-concurrency"))
	jc.Defaults.StartsPerSec = cmd.Float("job-rate")
	jc.Defaults.Interval = cmd.Duration("job-class-interval")
	jc.ReportEvery = cmd.Duration("job-report-every")
	jc.MaxAttempts = int(cmd.Int("job-max-attempts"))
	jc.LeftoverMax = int(cmd.Int("job-queue-max"))
	jc.QueueCount = int(cmd.Int("job-queue-count"))
	jc.QueueLen = int(cmd.Int("job-queue-len"))
	cc := rendercache.Config{DefaultMaxAge: cmd.Duration("render-cache-max-age"), MaxBytes: cmd.Int64("render-cache-max-bytes")}
	switch {
	case jc.Defaults.Concurrent < 1:
		return jc, cc, fmt.Errorf("--job-concurrency: must be at least 1")
	case jc.Defaults.StartsPerSec < 0:
		return jc, cc, fmt.Errorf("--job-rate: must not be negative")
	case jc.ReportEvery < 100*time.Millisecond:
		return jc, cc, fmt.Errorf("--job-report-every: must be at least 100ms")
	case jc.MaxAttempts < 1:
		return jc, cc, fmt.Errorf("--job-max-attempts: must be at least 1")
	case jc.QueueCount < 1:
		return jc, cc, fmt.Errorf("--job-queue-count: must be at least 1")
	case jc.QueueLen < 1:
		return jc, cc, fmt.Errorf("--job-queue-len: must be at least 1")
	case cc.DefaultMaxAge <= 0:
		return jc, cc, fmt.Errorf("--render-cache-max-age: must be positive")
	case cc.MaxBytes < 1<<20:
		return jc, cc, fmt.Errorf("--render-cache-max-bytes: must be at least 1 MiB")
	}
	if path := cmd.String("job-classes"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return jc, cc, fmt.Errorf("--job-classes: %w", err)
		}
		if err := json.Unmarshal(b, &jc.Classes); err != nil {
			return jc, cc, fmt.Errorf("--job-classes %s: %w", path, err)
		}
	}
	return jc, cc, nil
}
