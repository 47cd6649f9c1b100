package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func deployCmd() *cli.Command {
	return &cli.Command{
		Name:      "deploy",
		Usage:     "validate an application bundle and deploy it to the cluster",
		ArgsUsage: "DIR|FILE.tar.gz",
		Description: `deploy checks the bundle here first (every problem is reported with its field), packs a
directory into a tar.gz archive, uploads it with a progress bar, and prints the deployed
version. Redeploying a mount point creates a new version: running instances keep theirs.
Needs an author token (<data-dir>/author.token, or one from "cloudbrowser authors add") or the
admin token; a mount point belongs to the author who deployed it first. Symbolic links in the
directory are packed as copies of their targets, which must be files inside the directory. The
deploy succeeds only when every connected worker installed the new version.`,
		Flags: apiFlags("author.token"),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return fmt.Errorf("deploy needs one argument: a bundle directory or a .tar.gz file")
			}
			path := cmd.Args().First()
			archive, b, err := packBundle(path)
			if err != nil {
				return err
			}
			c, err := newAPIClient(cmd, "author.token")
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "deploying /%s (%s, %d files, %s)\n", b.Manifest.MountPoint, b.Manifest.Name, len(b.Files), size(len(archive)))
			body := &progress{r: bytes.NewReader(archive), total: len(archive), out: os.Stderr}
			var got wire.AppView
			err = c.do(ctx, http.MethodPost, "/api/v1/apps", body, "application/gzip", &got)
			body.finish()
			if err != nil {
				return err
			}
			fmt.Printf("deployed /%s version %d\n", got.MountPoint, got.Version)
			return nil
		},
	}
}

// packBundle validates a bundle directory or archive and returns the
// archive to upload.
func packBundle(path string) ([]byte, *bundle.Bundle, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle: %w", err)
	}
	if st.IsDir() {
		b, err := bundle.Load(os.DirFS(path), ".")
		if err != nil {
			return nil, nil, fmt.Errorf("bundle %s is not valid:\n  %s", path, problems(err))
		}
		arch, err := b.Pack()
		return arch, b, err
	}
	arch, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle: %w", err)
	}
	b, err := bundle.Unpack(bytes.NewReader(arch), bundle.Limits{})
	if err != nil {
		return nil, nil, fmt.Errorf("bundle %s is not valid:\n  %s", path, problems(err))
	}
	return arch, b, nil
}

// problems lists a bundle's field errors one per line.
func problems(err error) string {
	var es bundle.Errors
	if !errors.As(err, &es) || len(es) == 0 {
		return err.Error()
	}
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Field + ": " + e.Msg
	}
	return strings.Join(lines, "\n  ")
}

func size(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// progress is an upload body that draws a progress bar.
type progress struct {
	r     io.Reader
	total int
	sent  int
	out   io.Writer
	last  int
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.sent += n
	if pct := p.sent * 100 / max(p.total, 1); pct != p.last || err == io.EOF {
		p.last = pct
		bar := strings.Repeat("#", pct/4) + strings.Repeat(".", 25-pct/4)
		fmt.Fprintf(p.out, "\r[%s] %3d%% %s", bar, pct, size(p.sent))
	}
	return n, err
}

func (p *progress) finish() { fmt.Fprintln(p.out) }

func appsCmd() *cli.Command {
	action := func(verb, method, suffix string) *cli.Command {
		return &cli.Command{
			Name: verb, Usage: verb + " an application (admin token, or the owner's author token via --token)", ArgsUsage: "MOUNTPOINT",
			Flags: apiFlags("admin.token"),
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Len() != 1 {
					return fmt.Errorf("apps %s needs one argument: the mount point", verb)
				}
				name := strings.TrimPrefix(cmd.Args().First(), "/")
				c, err := newAPIClient(cmd, "admin.token")
				if err != nil {
					return err
				}
				if err := c.do(ctx, method, "/api/v1/apps/"+name+suffix, nil, "", nil); err != nil {
					return err
				}
				fmt.Printf("/%s: %sd\n", name, verb)
				return nil
			},
		}
	}
	// jobUsers changes (or with method GET shows) who may name an app in
	// a job besides its owner and the admin.
	jobUsers := func(verb, method, usage string, args int) *cli.Command {
		argsUsage := "MOUNTPOINT"
		if args == 2 {
			argsUsage += " PRINCIPAL"
		}
		return &cli.Command{
			Name: verb, Usage: usage + " (the owner's author token via --token, or the admin token)", ArgsUsage: argsUsage,
			Flags: apiFlags("admin.token"),
			Action: func(ctx context.Context, cmd *cli.Command) error {
				if cmd.Args().Len() != args {
					return fmt.Errorf("apps %s needs %d argument(s): %s", verb, args, argsUsage)
				}
				name := strings.TrimPrefix(cmd.Args().First(), "/")
				path := "/api/v1/apps/" + url.PathEscape(name) + "/job-users"
				if args == 2 {
					path += "/" + url.PathEscape(cmd.Args().Get(1))
				}
				c, err := newAPIClient(cmd, "admin.token")
				if err != nil {
					return err
				}
				var got struct {
					Owner    string   `json:"owner"`
					JobUsers []string `json:"jobUsers"`
				}
				if err := c.do(ctx, method, path, nil, "", &got); err != nil {
					return err
				}
				users := strings.Join(got.JobUsers, ", ")
				if users == "" {
					users = "nobody"
				}
				fmt.Printf("/%s: owner %s; jobs may also name it (besides the owner and the admin): %s\n", name, got.Owner, users)
				return nil
			},
		}
	}
	return &cli.Command{
		Name:  "apps",
		Usage: "list, remove, disable or enable applications; say who may use their pools in jobs",
		Commands: []*cli.Command{
			{
				Name: "list", Usage: "list the deployed applications", Flags: apiFlags("admin.token"),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, err := newAPIClient(cmd, "admin.token")
					if err != nil {
						return err
					}
					var apps []wire.AppView
					if err := c.do(ctx, http.MethodGet, "/api/v1/apps", nil, "", &apps); err != nil {
						return err
					}
					tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "APP\tNAME\tSTRATEGY\tVERSION\tPUBLIC\tSTATE\tFILES\tOWNER")
					for _, a := range apps {
						state := "enabled"
						if a.Disabled {
							state = "disabled"
						}
						fmt.Fprintf(tw, "/%s\t%s\t%s\t%d\t%v\t%s\t%d\t%s\n", a.MountPoint, a.Name, a.Strategy, a.Version, a.Public, state, a.Files, a.Owner)
					}
					return tw.Flush()
				},
			},
			action("remove", http.MethodDelete, ""),
			action("disable", http.MethodPost, "/disable"),
			action("enable", http.MethodPost, "/enable"),
			jobUsers("job-users", http.MethodGet, "show who may name an application in a job (--app)", 1),
			jobUsers("grant-jobs", http.MethodPut, "let a principal (an author, author, jobs or automation) name an application in its jobs (and automation sessions)", 2),
			jobUsers("revoke-jobs", http.MethodDelete, "take that back: the principal's next jobs naming the application are refused", 2),
		},
	}
}
