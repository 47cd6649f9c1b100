package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/reach"
)

func statusCmd() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the cluster: workers, applications, instances, jobs",
		Flags: append(apiFlags("admin.token"),
			&cli.BoolFlag{Name: "json", Usage: "print the raw JSON status"}),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, err := newAPIClient(cmd, "admin.token")
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := c.do(ctx, http.MethodGet, "/api/v1/cluster", nil, "", &raw); err != nil {
				return err
			}
			if cmd.Bool("json") {
				_, err := os.Stdout.Write(append(raw, '\n'))
				return err
			}
			var st wire.ClusterStatus
			if err := json.Unmarshal(raw, &st); err != nil {
				return fmt.Errorf("master's answer is not a cluster status: %w", err)
			}
			printStatus(os.Stdout, &st)
			return nil
		},
	}
}

// frameSize is the worker's screencast frames now as a share of the
// page's width, as the dashboard shows it: graded down while the worker is
// short of CPU, drawn small with --render-scale.
func frameSize(w wire.WorkerStatus) string {
	drawn, graded := w.RenderScale, w.Load.FrameScale
	if drawn <= 0 {
		drawn = 1
	}
	if graded <= 0 {
		graded = 1
	}
	s := fmt.Sprintf("%.0f%%", drawn*graded*100)
	if drawn < 1 {
		s += fmt.Sprintf(" (drawn at %.0f%%)", drawn*100)
	}
	return s
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func printStatus(out io.Writer, st *wire.ClusterStatus) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "master %s\tbalancer %s\troute lookups %d\tplacements %d\n\n", st.MasterID, st.Strategy, st.RouteLookups, st.Placements)
	fmt.Fprintln(tw, "WORKER\tADDRESS\tSTATE\tLOAD\tGO HEAP\tBROWSER PSS\tPROJECTED\tINSTANCES\tBROWSERS\tCLIENTS\tFRAMES SENT\tDROPPED\tFRAME SIZE")
	for _, w := range st.Workers {
		state := w.State
		if w.Draining {
			state += ",draining"
		}
		if w.Reach == reach.StateUnreachable {
			state += ",unreachable"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", w.ID, w.HTTPAddr, state, mib(w.Load.Total),
			mib(w.Load.GoHeap), mib(w.Load.BrowserPSS), mib(w.Projected), w.Load.Instances, w.Load.Browsers, w.Load.Clients,
			w.Load.FramesSent, w.Load.FramesDropped, frameSize(w))
	}
	for _, w := range st.Workers { // the proxies cannot reach it either
		if w.Reach == reach.StateUnreachable {
			fmt.Fprintf(tw, "! %s is unreachable at %s (check its --advertise): %s\n", w.ID, w.HTTPAddr, w.ReachError)
		}
	}
	fmt.Fprintln(tw, "\nPOOL\tWORKER\tMIN\tMAX\tSIZE\tFREE\tLOCKED\tCREATED\tDESTROYED\tSHIFTED\tLEASES\tLEASE FAILURES\tSEQUENCE FAILURES\tAVG WAIT")
	for _, w := range st.Workers {
		var ps poolStats
		if len(w.Pools) == 0 || json.Unmarshal(w.Pools, &ps) != nil {
			continue
		}
		for _, p := range ps.Pools {
			name := "/" + p.App
			if p.General {
				name = "(general)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.1f ms\n", name, w.ID, p.MinSize, p.MaxSize,
				p.Size, p.Free, p.Locked, p.Created, p.Destroyed, p.ShiftedIn+p.ShiftedOut, p.Leases,
				counts(p.LeaseFailures), counts(p.SequenceFailures), p.AvgLeaseWaitMs)
		}
	}
	blocked := map[string]uint64{}
	for _, w := range st.Workers {
		for app, n := range w.Load.EgressBlocked {
			blocked[app] += n
		}
	}
	fmt.Fprintln(tw, "\nAPP\tNAME\tSTRATEGY\tVERSION\tPUBLIC\tEGRESS BLOCKED")
	for _, a := range st.Apps {
		fmt.Fprintf(tw, "/%s\t%s\t%s\t%d\t%v\t%d\n", a.MountPoint, a.Name, a.Strategy, a.Version, a.Public, blocked[a.MountPoint])
	}
	fmt.Fprintln(tw, "\nINSTANCE\tAPP\tVERSION\tWORKER\tOWNER\tAGE")
	for _, in := range st.Instances {
		fmt.Fprintf(tw, "%s\t/%s\t%d\t%s\t%s\t%s\n", in.ID, in.App, in.Version, in.Worker, in.Owner, time.Since(in.Created).Round(time.Second))
	}
	fmt.Fprintln(tw, "\nMEMBER\tROLE\tADDRESS\tSTATE")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, m.Role, m.Addr, m.State)
	}
	fmt.Fprintln(tw, "\nPROXY\tADDRESS")
	for _, p := range st.Proxies {
		fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.Addr)
	}
	if st.Jobs != nil {
		printJobsStatus(tw, st.Jobs)
	}
	tw.Flush()
}

// printJobsStatus prints the jobs part of the status: slots, queues,
// outcomes, monitors and the render cache.
func printJobsStatus(tw io.Writer, j *wire.JobsStatus) {
	fmt.Fprintln(tw, "\nJOB SLOTS\tSLOTS\tUSED\tFREE")
	for _, w := range j.Workers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", w.Worker, w.Slots, w.Used, w.Free)
	}
	fmt.Fprintln(tw, "\nJOB CLASS\tQUEUED")
	for _, k := range sortedKeys(j.Queued) {
		fmt.Fprintf(tw, "%s\t%d\n", k, j.Queued[k])
	}
	fmt.Fprintf(tw, "(working)\t%d\n", j.Working)
	fmt.Fprintf(tw, "\njob outcomes\t%s\n", counts(j.Outcomes))
	mon := make(map[string]int64, len(j.Monitors))
	for k, n := range j.Monitors {
		if k == "" {
			k = "unchecked"
		}
		mon[k] += int64(n)
	}
	fmt.Fprintf(tw, "monitors\t%s\n", counts(mon))
	fmt.Fprintf(tw, "job wait\t%s\n", histogramLine(j.Wait))
	fmt.Fprintf(tw, "job run\t%s\n", histogramLine(j.Run))
	c := j.Cache
	ratio := "-"
	if c.Hits+c.Misses > 0 {
		ratio = fmt.Sprintf("%.0f%%", float64(c.Hits)*100/float64(c.Hits+c.Misses))
	}
	fmt.Fprintf(tw, "render cache\t%d entries, %s, hits %d, misses %d (hit ratio %s), evictions %d\n",
		c.Entries, mib(uint64(max(c.Bytes, 0))), c.Hits, c.Misses, ratio, c.Evictions)
	if len(j.Changes) > 0 {
		fmt.Fprintln(tw, "\nMONITOR CHANGE\tURL\tFROM\tTO\tREASON\tAT")
		for _, ch := range j.Changes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ch.Monitor, ch.URL, orDash(ch.From), ch.To, orDash(ch.Reason), when(ch.At))
		}
	}
}

// histogramLine summarises a histogram: count, mean and bucket quantiles.
func histogramLine(h wire.Histogram) string {
	if h.Count == 0 {
		return "-"
	}
	q := func(p float64) string {
		v := h.Quantile(p)
		if math.IsInf(v, 1) {
			return "> last bucket"
		}
		return "≤ " + strconv.FormatFloat(v, 'g', 3, 64) + " s"
	}
	return fmt.Sprintf("%d jobs, mean %.2f s, p50 %s, p95 %s", h.Count, h.Sum/float64(h.Count), q(0.5), q(0.95))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// poolStats is the part of worker/pool.ManagerStats the status prints.
type poolStats struct {
	Pools []struct {
		App                                  string
		General                              bool
		MinSize, MaxSize, Size, Free, Locked int
		Created, Destroyed, ShiftedIn        int64
		ShiftedOut, Leases                   int64
		LeaseFailures, SequenceFailures      map[string]int64
		AvgLeaseWaitMs                       float64
	} `json:"pools"`
}

// counts prints a map of counters compactly ("-" when empty).
func counts(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ",")
}
