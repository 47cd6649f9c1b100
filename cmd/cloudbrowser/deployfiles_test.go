package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"
	"go.yaml.in/yaml/v3"
)

// The deployment files, checked against the CLI: TestDeploymentFiles
// parses docker-compose.yml, the Dockerfile and the systemd units, runs
// every command line they hold through the real command tree (dryRun, in
// a helper process), and checks what each command needs: its flags and
// environment variables exist, the files it reads are on its volumes or
// credentials, the ports published are ones it listens on, the addresses
// it dials and advertises are the other services', and the one address
// rule holds. Where the tools are installed, `docker compose config` and
// `systemd-analyze verify` check the files too; the test says which ran.
const (
	composeFile = "docker-compose.yml"
	unitDir     = "deploy/systemd"
	installPath = "/usr/local/bin/cloudbrowser" // the units' and the image's
	deployDoc   = "docs/deploying.md"
)

// repoRoot is the module root, seen from this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

func TestDeploymentFiles(t *testing.T) {
	root := repoRoot(t)
	env := envIndex(app())
	compose := checkCompose(t, root, env)
	checkUnits(t, root, env)
	doc, err := os.ReadFile(filepath.Join(root, deployDoc))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{composeFile, "cloudbrowser-master.service", "cloudbrowser-worker.service", "cloudbrowser-proxy.service", "LoadCredential", "worker.key"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("%s does not mention %s", deployDoc, want)
		}
	}
	// What the tools themselves say, where they are installed.
	var ran []string
	if composeConfig(t, root, compose) {
		ran = append(ran, "docker compose config")
	}
	if verifyUnits(t, root) {
		ran = append(ran, "systemd-analyze verify")
	}
	if len(ran) == 0 {
		t.Logf("validated statically against the CLI only: no container runtime with compose and no systemd-analyze here")
	} else {
		t.Logf("validated statically against the CLI, and with %s", strings.Join(ran, " and "))
	}
}

// --- the CLI side

// envIndex maps each environment variable the CLI reads to the commands
// ("" = the root, "worker", "jobs submit") of the flags it sets.
func envIndex(root *cli.Command) map[string][]string {
	idx := map[string][]string{}
	var walk func(c *cli.Command, p string)
	walk = func(c *cli.Command, p string) {
		for _, f := range c.Flags {
			if d, ok := f.(cli.DocGenerationFlag); ok {
				for _, e := range d.GetEnvVars() {
					idx[e] = append(idx[e], p)
				}
			}
		}
		for _, s := range c.Commands {
			walk(s, strings.TrimSpace(p+" "+s.Name))
		}
	}
	walk(root, "")
	// Read directly, not through a flag (main.go, users.go, sequences).
	for _, e := range []string{"CB_SECRET", "CB_PASSWORD"} {
		idx[e] = append(idx[e], "*")
	}
	return idx
}

// envErr says why variable name means nothing to command p ("" = it
// does; p "*" = to any command).
func envErr(idx map[string][]string, name, p string) string {
	if !strings.HasPrefix(name, "CB_") {
		return ""
	}
	cmds, ok := idx[name]
	if !ok && !strings.HasPrefix(name, "CB_SECRET_") { // ${secret:NAME} of pool sequences
		return name + " is no environment variable of the CLI"
	}
	if p == "*" || !ok || slices.Contains(cmds, "") || slices.Contains(cmds, "*") || slices.Contains(cmds, p) {
		return ""
	}
	return fmt.Sprintf("%s sets no flag of `cloudbrowser %s` (it is for: %s)", name, p, strings.Join(cmds, ", "))
}

// parse runs argv (without the program) through the CLI in a dry run.
func parse(t *testing.T, where string, env map[string]string, argv []string) dryParse {
	t.Helper()
	res := runProcess(t, "dry", env, argv...)
	var got dryParse
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatalf("%s: dry run of %q: %v\n%s", where, argv, err, res.stderr)
	}
	if got.Error != "" {
		t.Errorf("%s: `cloudbrowser %s`: %s", where, strings.Join(argv, " "), got.Error)
	}
	if got.Address != "" {
		t.Errorf("%s: `cloudbrowser %s`: %s", where, strings.Join(argv, " "), got.Address)
	}
	return got
}

func (d dryParse) role() string { return strings.Join(d.Command, " ") }

// port is the port of a host:port flag value ("" if none).
func port(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return p
}

// listenPorts are the ports the command binds, by flag.
func (d dryParse) listenPorts() map[string]string {
	out := map[string]string{}
	for _, f := range []string{"listen", "admin", "rmi", "gossip"} {
		if p := port(d.Values[f]); p != "" && p != "0" {
			out[p] = f
		}
	}
	return out
}

// splitWords splits a command line as compose and systemd do for the
// forms used here: blanks, '…', "…" and backslashes. Variables and command
// substitutions are refused: this test could not check what they become.
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '$' || c == '`':
			return nil, fmt.Errorf("%q: variables and substitutions are not checkable; give values (or CB_* variables) instead", s)
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out, inWord = append(out, cur.String()), false
				cur.Reset()
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("%q: unterminated quote", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				} else if s[i] == '$' || s[i] == '`' {
					return nil, fmt.Errorf("%q: variables and substitutions are not checkable", s)
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("%q: unterminated quote", s)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// --- Dockerfile

type dockerfile struct {
	path            string
	stages          []string // named build stages
	entrypoint, cmd []string // exec form
	env             map[string]string
	user            string
	volumes         []string
	copies          [][3]string // stage, source, destination of COPY --from
	builtOut, pkg   string      // go build -o builtOut pkg
	runs            string
}

var goBuild = regexp.MustCompile(`go build\b.*?-o\s+(\S+)\s+(\./\S+)`)

func parseDockerfile(t *testing.T, root, rel string) *dockerfile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerfile{path: rel, env: map[string]string{}}
	// Continuation lines first, then one instruction per line.
	text := regexp.MustCompile(`\\\n(\s*#[^\n]*\n)*`).ReplaceAllString(string(raw), " ")
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		execForm := func() []string {
			var v []string
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				t.Errorf("%s: %s %s: use the exec form (a JSON array): %v", rel, instr, rest, err)
			}
			return v
		}
		switch strings.ToUpper(instr) {
		case "FROM": // a new stage: root, no ENV or VOLUME of the last
			d.user, d.env, d.volumes = "", map[string]string{}, nil
			if f := strings.Fields(rest); len(f) == 3 && strings.EqualFold(f[1], "AS") {
				d.stages = append(d.stages, f[2])
			}
		case "ENTRYPOINT":
			d.entrypoint = execForm()
		case "CMD":
			d.cmd = execForm()
		case "USER":
			d.user = rest
		case "VOLUME":
			d.volumes = append(d.volumes, strings.Fields(rest)...)
		case "ENV":
			words, err := splitWords(rest)
			if err != nil {
				t.Errorf("%s: ENV: %v", rel, err)
			}
			if len(words) == 2 && !strings.Contains(words[0], "=") {
				d.env[words[0]] = words[1]
				break
			}
			for _, w := range words {
				k, v, _ := strings.Cut(w, "=")
				d.env[k] = v
			}
		case "COPY":
			f := strings.Fields(rest)
			if len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
				d.copies = append(d.copies, [3]string{strings.TrimPrefix(f[0], "--from="), f[1], f[2]})
			}
		case "RUN":
			d.runs += rest + "\n"
			if m := goBuild.FindStringSubmatch(rest); m != nil {
				d.builtOut, d.pkg = m[1], m[2]
			}
		}
	}
	return d
}

// checkDockerfile checks the image: the binary it builds is the CLI and
// is what ENTRYPOINT runs, a non-root user, Chromium for the workers, and
// a default command the CLI takes.
func checkDockerfile(t *testing.T, root string, d *dockerfile, idx map[string][]string) {
	t.Helper()
	if d.pkg != "./cmd/cloudbrowser" {
		t.Errorf("%s: builds %q, want ./cmd/cloudbrowser", d.path, d.pkg)
	}
	installed := ""
	for _, c := range d.copies {
		if slices.Contains(d.stages, c[0]) && c[1] == d.builtOut {
			installed = c[2]
		}
	}
	if installed != installPath {
		t.Errorf("%s: the built binary is installed at %q, want %s (the systemd units run that path)", d.path, installed, installPath)
	}
	if len(d.entrypoint) == 0 || (d.entrypoint[0] != installPath && d.entrypoint[0] != path.Base(installPath)) {
		t.Errorf("%s: ENTRYPOINT %q: want [%q] (then every command is a cloudbrowser command line)", d.path, d.entrypoint, path.Base(installPath))
	}
	if u := d.user; u == "" || u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
		t.Errorf("%s: the image runs as %q: want a user of its own", d.path, u)
	}
	if !strings.Contains(d.runs, "chromium") {
		t.Errorf("%s: installs no Chromium for the workers", d.path)
	}
	for k := range d.env {
		if e := envErr(idx, k, "*"); e != "" {
			t.Errorf("%s: ENV %s", d.path, e)
		}
	}
	got := parse(t, d.path+" CMD", d.env, d.cmd)
	if dir := got.Values["data-dir"]; (got.role() == "up" || got.role() == "master") && !slices.Contains(d.volumes, dir) {
		t.Errorf("%s: CMD keeps its data in %s, which is no VOLUME (%v)", d.path, dir, d.volumes)
	}
	if _, err := os.Stat(filepath.Join(root, ".dockerignore")); err != nil {
		t.Errorf("no .dockerignore: the build context would carry node_modules and binaries: %v", err)
	}
}

// --- docker-compose.yml

type composeDoc struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Build       any                  `yaml:"build"`
	Image       string               `yaml:"image"`
	Entrypoint  any                  `yaml:"entrypoint"`
	Command     any                  `yaml:"command"`
	Environment any                  `yaml:"environment"`
	Volumes     []string             `yaml:"volumes"`
	Ports       []string             `yaml:"ports"`
	Hostname    string               `yaml:"hostname"`
	DependsOn   any                  `yaml:"depends_on"`
	Healthcheck *composeHealth       `yaml:"healthcheck"`
	Extra       map[string]any       `yaml:",inline"`
	parsed      dryParse             `yaml:"-"`
	env         map[string]string    `yaml:"-"`
	mounts      map[string][2]string `yaml:"-"` // container path -> volume, mode
}

type composeHealth struct {
	Test []string `yaml:"test"`
}

// words is a compose command or entrypoint: a string (split like a shell
// would, without one) or a list.
func words(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return splitWords(v)
	case []any:
		out := make([]string, len(v))
		for i, w := range v {
			s, ok := w.(string)
			if !ok {
				return nil, fmt.Errorf("%v: not a string", w)
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v: want a string or a list", v)
}

// environment is a compose environment: a map or a KEY=VALUE list.
func environment(v any) (map[string]string, error) {
	out := map[string]string{}
	switch v := v.(type) {
	case nil:
	case map[string]any:
		for k, x := range v {
			out[k] = fmt.Sprint(x)
		}
	case []any:
		for _, x := range v {
			k, val, _ := strings.Cut(fmt.Sprint(x), "=")
			out[k] = val
		}
	default:
		return nil, fmt.Errorf("environment %v: want a map or a list", v)
	}
	return out, nil
}

// dependsOn is a compose depends_on: service -> condition.
func dependsOn(v any) map[string]string {
	out := map[string]string{}
	switch v := v.(type) {
	case []any:
		for _, s := range v {
			out[fmt.Sprint(s)] = "service_started"
		}
	case map[string]any:
		for s, c := range v {
			cond := "service_started"
			if m, ok := c.(map[string]any); ok && m["condition"] != nil {
				cond = fmt.Sprint(m["condition"])
			}
			out[s] = cond
		}
	}
	return out
}

// inVolume finds the volume holding container path p: its name, mode and
// p relative to it.
func (s *composeService) inVolume(p string) (vol, mode, rel string, ok bool) {
	best := ""
	for dst := range s.mounts {
		if (p == dst || strings.HasPrefix(p, strings.TrimSuffix(dst, "/")+"/")) && len(dst) > len(best) {
			best = dst
		}
	}
	if best == "" {
		return "", "", "", false
	}
	rel = strings.TrimPrefix(strings.TrimPrefix(p, best), "/")
	return s.mounts[best][0], s.mounts[best][1], rel, true
}

// checkCompose checks every service of docker-compose.yml; it returns the
// file's path.
func checkCompose(t *testing.T, root string, idx map[string][]string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, composeFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc composeDoc
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	if len(doc.Services) == 0 {
		t.Fatalf("%s: no services", composeFile)
	}
	images := map[string]*dockerfile{}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range doc.Services {
			if !yield(n) {
				return
			}
		}
	})
	services := map[string]*composeService{}
	for _, name := range names {
		s := doc.Services[name]
		services[name] = &s
		where := composeFile + " " + name
		for k := range s.Extra {
			if !slices.Contains([]string{"init", "restart", "stop_grace_period", "networks"}, k) {
				t.Errorf("%s: key %q is not checked by this test: check it, or leave it out", where, k)
			}
		}
		// The image: built from a Dockerfile of this repository.
		b, ok := s.Build.(map[string]any)
		if !ok {
			t.Errorf("%s: build %v: want {context, dockerfile}", where, s.Build)
			continue
		}
		df := filepath.ToSlash(filepath.Join(fmt.Sprint(b["context"]), fmt.Sprint(b["dockerfile"])))
		img := images[df]
		if img == nil {
			img = parseDockerfile(t, root, df)
			checkDockerfile(t, root, img, idx)
			images[df] = img
		}
		entry, err := words(s.Entrypoint)
		if err != nil {
			t.Errorf("%s: entrypoint: %v", where, err)
		}
		if entry == nil {
			entry = img.entrypoint
		}
		args, err := words(s.Command)
		if err != nil {
			t.Errorf("%s: command: %v", where, err)
			continue
		}
		if s.Command == nil {
			args = img.cmd
		}
		if len(entry) != 1 || path.Base(entry[0]) != "cloudbrowser" {
			t.Errorf("%s: runs %q: want the image's cloudbrowser entrypoint", where, entry)
			continue
		}
		s.env = map[string]string{}
		for k, v := range img.env {
			s.env[k] = v
		}
		own, err := environment(s.Environment)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		for k, v := range own {
			s.env[k] = v
		}
		s.parsed = parse(t, where, s.env, args)
		for k := range own {
			if e := envErr(idx, k, s.parsed.role()); e != "" {
				t.Errorf("%s: environment: %s", where, e)
			}
		}
		// Volumes: declared, and mounted where the command's files are.
		s.mounts = map[string][2]string{}
		for _, v := range s.Volumes {
			f := strings.Split(v, ":")
			if len(f) < 2 || len(f) > 3 {
				t.Errorf("%s: volume %q: want source:target[:mode]", where, v)
				continue
			}
			mode := "rw"
			if len(f) == 3 {
				mode = f[2]
			}
			if strings.HasPrefix(f[0], ".") || strings.HasPrefix(f[0], "/") {
				if _, err := os.Stat(filepath.Join(root, f[0])); err != nil {
					t.Errorf("%s: bind mount %s: %v", where, f[0], err)
				}
			} else if _, ok := doc.Volumes[f[0]]; !ok {
				t.Errorf("%s: volume %s is not declared under volumes:", where, f[0])
			}
			s.mounts[f[1]] = [2]string{f[0], mode}
		}
		if dir := s.parsed.Values["data-dir"]; s.parsed.role() == "master" || s.parsed.role() == "up" {
			if _, mode, _, ok := s.inVolume(dir); !ok || mode != "rw" {
				t.Errorf("%s: --data-dir %s is on no writable volume: the secret and the state would die with the container", where, dir)
			}
		}
		// Ports published are ports the command listens on.
		for _, p := range s.Ports {
			c := p[strings.LastIndex(p, ":")+1:]
			c, _, _ = strings.Cut(c, "/")
			if _, ok := s.parsed.listenPorts()[c]; !ok {
				t.Errorf("%s: publishes %s, but its command listens on %v", where, p, s.parsed.listenPorts())
			}
		}
	}
	// What services say of each other.
	for _, name := range names {
		s := services[name]
		where := composeFile + " " + name
		if s.parsed.Values == nil {
			continue
		}
		self := []string{name}
		if s.Hostname != "" {
			self = append(self, s.Hostname)
		}
		for dep, cond := range dependsOn(s.DependsOn) {
			d, ok := services[dep]
			if !ok {
				t.Errorf("%s: depends on %s, which is no service", where, dep)
				continue
			}
			if cond == "service_healthy" && (d.Healthcheck == nil || len(d.Healthcheck.Test) < 2) {
				t.Errorf("%s: waits for %s to be healthy, which has no healthcheck", where, dep)
			}
		}
		role := s.parsed.role()
		if role != "worker" && role != "proxy" {
			continue
		}
		// The master it dials is a service listening there for RMI.
		host, p, _ := net.SplitHostPort(s.parsed.Values["master"])
		m, ok := services[host]
		if !ok || m.parsed.role() != "master" || port(m.parsed.Values["rmi"]) != p {
			t.Errorf("%s: --master %s is no master service's --rmi", where, s.parsed.Values["master"])
			continue
		}
		// What it advertises is its own name.
		if adv := s.parsed.Values["advertise"]; adv != "" {
			h, ap, _ := net.SplitHostPort(adv)
			if !slices.Contains(self, h) || ap != port(s.parsed.Values["listen"]) {
				t.Errorf("%s: --advertise %s: want this service's name and its --listen port %s", where, adv, port(s.parsed.Values["listen"]))
			}
		}
		if adv := s.parsed.Values["gossip-advertise"]; adv != "" {
			if _, err := netip.ParseAddr(adv); err != nil && !slices.Contains(self, adv) {
				t.Errorf("%s: --gossip-advertise %s is not this service's name", where, adv)
			}
		}
		// Its key: a file the master writes, on the master's volume, and
		// the one the master's healthcheck waits for when it waits.
		kf := s.parsed.Values["secret-file"]
		vol, _, rel, ok := s.inVolume(kf)
		if kf == "" || !ok {
			t.Errorf("%s: --secret-file %q is on none of its volumes %v", where, kf, s.Volumes)
			continue
		}
		mvol, _, mrel, mok := m.inVolume(m.parsed.Values["data-dir"])
		if want := path.Join(mrel, role+".key"); !mok || mvol != vol || rel != want {
			t.Errorf("%s: --secret-file %s is %s on volume %s; the master writes its %s key at %s on volume %s", where, kf, rel, vol, role, want, mvol)
		}
		if dependsOn(s.DependsOn)[host] == "service_healthy" {
			test := m.Healthcheck.Test
			hvol, _, hrel, _ := m.inVolume(test[len(test)-1])
			if hvol != vol || hrel != rel {
				t.Errorf("%s: waits for %s's healthcheck %v, which does not wait for %s", where, host, test, kf)
			}
		}
	}
	return filepath.Join(root, composeFile)
}

// composeConfig has compose itself validate the file, where a container
// runtime with compose is installed; it reports whether it ran.
func composeConfig(t *testing.T, root, file string) bool {
	t.Helper()
	for _, tool := range [][]string{{"docker", "compose"}, {"podman", "compose"}, {"docker-compose"}} {
		if _, err := exec.LookPath(tool[0]); err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
		err := exec.CommandContext(ctx, tool[0], append(tool[1:], "version")...).Run()
		cancel()
		if err != nil {
			continue // e.g. a docker client without the compose plugin
		}
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, tool[0], append(tool[1:], "-f", file, "config", "--quiet")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s config: %v\n%s", strings.Join(tool, " "), err, out)
		}
		return true
	}
	return false
}

// --- systemd units

type unit map[string]map[string][]string // section -> key -> values

func parseUnit(t *testing.T, p string) unit {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	u, sec := unit{}, ""
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			sec = line[1 : len(line)-1]
			u[sec] = map[string][]string{}
		case sec == "":
			t.Errorf("%s:%d: outside a section", p, i+1)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.HasSuffix(line, "\\") {
				t.Errorf("%s:%d: want Key=Value on one line: %q", p, i+1, line)
				continue
			}
			u[sec][k] = append(u[sec][k], v)
		}
	}
	return u
}

// one is the single value of key in [Service] ("" if unset).
func (u unit) one(t *testing.T, where, key string) string {
	t.Helper()
	v := u["Service"][key]
	if len(v) > 1 {
		t.Errorf("%s: %s given %d times", where, key, len(v))
	}
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// specifiers expands the systemd specifiers the units may use.
func specifiers(s, unitName string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("%q: a lone %%", s)
		}
		i++
		switch s[i] {
		case 'S':
			b.WriteString("/var/lib")
		case 'd':
			b.WriteString("/run/credentials/" + unitName)
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("%q: specifier %%%c is not checked by this test", s, s[i])
		}
	}
	return b.String(), nil
}

// envFile reads a KEY=VALUE file as systemd's EnvironmentFile does (the
// forms used here: no quotes, no continuation).
func envFile(t *testing.T, p string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Error(err)
		return nil
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(v, `"'\$`) {
			t.Errorf("%s:%d: want KEY=VALUE without quotes or variables: %q", p, i+1, line)
			continue
		}
		out[k] = v
	}
	return out
}

// chromiumBreakers are hardening options Chromium does not tolerate: its
// sandbox makes user, PID and network namespaces and installs its own
// seccomp filters, V8 writes executable code, and the worker reads
// /proc/meminfo to size its pools.
var chromiumBreakers = map[string]func(v string) bool{
	"MemoryDenyWriteExecute": func(v string) bool { return v == "yes" || v == "true" },
	"RestrictNamespaces":     func(v string) bool { return v != "no" && v != "false" },
	"PrivateUsers":           func(v string) bool { return v == "yes" || v == "true" },
	"SystemCallFilter":       func(v string) bool { return v != "" },
	"ProcSubset":             func(v string) bool { return v == "pid" },
}

// checkUnits checks deploy/systemd/cloudbrowser-<role>.service.
func checkUnits(t *testing.T, root string, idx map[string][]string) {
	t.Helper()
	for _, role := range []string{"master", "worker", "proxy"} {
		name := "cloudbrowser-" + role + ".service"
		where := filepath.ToSlash(filepath.Join(unitDir, name))
		u := parseUnit(t, filepath.Join(root, unitDir, name))
		if got := u.one(t, where, "Restart"); got != "on-failure" {
			t.Errorf("%s: Restart=%s, want on-failure", where, got)
		}
		if got := u.one(t, where, "NoNewPrivileges"); got != "yes" {
			t.Errorf("%s: NoNewPrivileges=%s, want yes", where, got)
		}
		if user := u.one(t, where, "User"); user == "" || user == "root" || user == "0" {
			t.Errorf("%s: User=%q: want a user of its own", where, user)
		}
		if len(u["Install"]["WantedBy"]) == 0 {
			t.Errorf("%s: no WantedBy: enable would not start it at boot", where)
		}
		states := strings.Fields(u.one(t, where, "StateDirectory"))
		if len(states) == 0 {
			t.Errorf("%s: no StateDirectory", where)
		}
		inState := func(what, p string) {
			rel, ok := strings.CutPrefix(p, "/var/lib/")
			if !ok || !slices.Contains(states, strings.SplitN(rel, "/", 2)[0]) {
				t.Errorf("%s: %s %s is not in its StateDirectory %v", where, what, p, states)
			}
		}
		// The environment: its EnvironmentFile (an example beside the
		// unit) and Environment= lines.
		env := map[string]string{}
		ef := u.one(t, where, "EnvironmentFile")
		if want := "/etc/cloudbrowser/" + role + ".env"; ef != want {
			t.Errorf("%s: EnvironmentFile=%s, want %s", where, ef, want)
		} else {
			env = envFile(t, filepath.Join(root, unitDir, role+".env"))
			for k := range env {
				if !strings.HasPrefix(k, "CB_") {
					t.Errorf("%s.env: %s is no CB_* variable", role, k)
				} else if e := envErr(idx, k, role); e != "" {
					t.Errorf("%s.env: %s", role, e)
				}
			}
		}
		for _, kv := range u["Service"]["Environment"] {
			x, err := specifiers(kv, name)
			if err != nil {
				t.Errorf("%s: Environment: %v", where, err)
				continue
			}
			k, v, _ := strings.Cut(x, "=")
			env[k] = v
			if k == "HOME" {
				inState("HOME", v)
			}
		}
		if wd := u.one(t, where, "WorkingDirectory"); wd != "" {
			x, err := specifiers(wd, name)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			}
			inState("WorkingDirectory", x)
		}
		// The command line.
		line, err := specifiers(u.one(t, where, "ExecStart"), name)
		if err != nil {
			t.Errorf("%s: ExecStart: %v", where, err)
			continue
		}
		argv, err := splitWords(line)
		if err != nil || len(argv) < 2 {
			t.Errorf("%s: ExecStart=%s: %v", where, line, err)
			continue
		}
		if argv[0] != installPath {
			t.Errorf("%s: runs %s, want %s (where the image and docs/deploying.md install it)", where, argv[0], installPath)
		}
		got := parse(t, where, env, argv[1:])
		if got.role() != role {
			t.Errorf("%s: runs `cloudbrowser %s`, want the %s role", where, got.role(), role)
		}
		switch role {
		case "master":
			inState("--data-dir", got.Values["data-dir"])
			// The proxies outlive a crashed master and are adopted by the
			// restarted one (docs/architecture.md).
			if km := u.one(t, where, "KillMode"); km != "process" {
				t.Errorf("%s: KillMode=%s: a restart after a crash would kill the proxy processes the new master adopts; want process", where, km)
			}
		default:
			// The key comes as a credential: root-owned on disk.
			kf := got.Values["secret-file"]
			cred, ok := strings.CutPrefix(kf, "/run/credentials/"+name+"/")
			var src string
			for _, lc := range u["Service"]["LoadCredential"] {
				if id, p, _ := strings.Cut(lc, ":"); id == cred {
					src = p
				}
			}
			if !ok || src != "/etc/cloudbrowser/"+role+".key" {
				t.Errorf("%s: --secret-file %s: want %%d/%s.key loaded from /etc/cloudbrowser/%s.key (LoadCredential)", where, kf, role, role)
			}
		}
		if role == "worker" {
			for k, breaks := range chromiumBreakers {
				for _, v := range u["Service"][k] {
					if breaks(v) {
						t.Errorf("%s: %s=%s: Chromium does not run under it", where, k, v)
					}
				}
			}
		}
	}
}

// verifyUnits has systemd-analyze check the units' syntax and values,
// where it is installed; it reports whether it ran. The units are copied
// with ExecStart's program pointed at an existing file (verify wants it
// installed); every other line is checked as written.
func verifyUnits(t *testing.T, root string) bool {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		return false
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"master", "worker", "proxy"} {
		name := "cloudbrowser-" + role + ".service"
		raw, err := os.ReadFile(filepath.Join(root, unitDir, name))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(raw), "ExecStart="+installPath, "ExecStart="+self)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard
		out, err := exec.CommandContext(ctx, "systemd-analyze", "verify", "--man=no", p).CombinedOutput()
		cancel()
		// verify exits 0 on warnings (an unknown key, a bad value): any
		// output is a finding.
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
	return true
}
