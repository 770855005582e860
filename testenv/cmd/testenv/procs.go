// Processes: free ports, starting components detached with their logs in files, the state
// file that records their pids, and stopping them by those pids.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one started component, as recorded in state.json.
type proc struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	// Exe is the binary the pid must be running; a pid whose /proc/PID/exe differs was
	// reused by another program and is never signalled.
	Exe string `json:"exe"`
	// Args are the arguments it was started with, so `restart` can start it again
	// exactly so.
	Args []string `json:"args"`
	// Endpoint is where the component serves, for the status report.
	Endpoint string `json:"endpoint"`
	Log      string `json:"log"`
}

// state is what `up` records for `status`, `down` and `compact`.
type state struct {
	APIServer  string    `json:"apiServer"`
	Etcd       string    `json:"etcd"`
	Kubeconfig string    `json:"kubeconfig"`
	Version    string    `json:"version"`
	Started    time.Time `json:"started"`
	// Procs in start order; `down` stops them in reverse.
	Procs []proc `json:"procs"`
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

func loadState(dir string) (*state, error) {
	b, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(dir), err)
	}
	return &s, nil
}

func (s *state) save(dir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(dir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, statePath(dir))
}

// freePort asks the kernel for an unused port on 127.0.0.1. The port is free when returned;
// the component binds it a moment later.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	// Hold every listener until all are chosen, so the kernel cannot hand out one twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// start launches exe in its own session, so it outlives this command and ignores the
// terminal's signals, with stdout and stderr appended to logDir/name.log (a restarted
// component's log goes on after its previous run's).
func start(name, exe string, args []string, logDir string) (proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return proc{}, err
	}
	defer f.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return proc{}, fmt.Errorf("starting %s (%s): %w", name, exe, err)
	}
	p := proc{Name: name, Pid: cmd.Process.Pid, Exe: exe, Args: args, Log: logPath}
	// Reap the child if it dies while this command still runs; after this command exits,
	// init adopts it.
	go func() { _ = cmd.Wait() }()
	return p, nil
}

// alive reports whether p's pid still runs p's binary.
func (p proc) alive() bool {
	if p.Pid <= 0 {
		return false
	}
	// A binary rebuilt while running shows as "path (deleted)"; exeOf trims that.
	if exe := exeOf(p.Pid); exe == "" || exe != p.Exe {
		return false
	}
	// A zombie keeps its exe link until reaped; it is not running.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	return true
}

// stop sends SIGTERM, waits up to grace for the process to exit, then sends SIGKILL. It
// does nothing to a pid that no longer runs p's binary.
func (p proc) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	if err := syscall.Kill(p.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s (pid %d): %w", p.Name, p.Pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("testenv: %s (pid %d) ignored SIGTERM for %s; sending SIGKILL\n", p.Name, p.Pid, grace)
	if err := syscall.Kill(p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pid %d): %w", p.Name, p.Pid, err)
	}
	for i := 0; i < 100 && p.alive(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if p.alive() {
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.Pid)
	}
	return nil
}

// stopAll stops procs in reverse start order and reports every failure.
func stopAll(procs []proc) error {
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if !p.alive() {
			continue
		}
		fmt.Printf("testenv: stopping %s (pid %d)\n", p.Name, p.Pid)
		if err := p.stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rssKiB is the process's resident set size in KiB, or 0 if it cannot be read.
func (p proc) rssKiB() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kib
		}
	}
	return 0
}

// leftovers lists the processes that run one of the cluster's binaries from dir/bin: after
// `down` there must be none. The orchestrator itself counts only when it serves etcd, so a
// concurrent `testenv status` is not mistaken for a component.
func leftovers(dir string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe := exeOf(pid)
		if !strings.HasPrefix(exe, bin) || !(proc{Pid: pid, Exe: exe}).alive() {
			continue
		}
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(exe) == "testenv" && (len(args) < 2 || args[1] != "etcd") {
			continue
		}
		cmdline := strings.Join(args, " ")
		if len(cmdline) > 160 {
			cmdline = cmdline[:160] + "..."
		}
		found = append(found, fmt.Sprintf("pid %d: %s", pid, cmdline))
	}
	return found
}

// exeOf is the binary pid runs, or "" if it cannot be read.
func exeOf(pid int) string {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(exe, " (deleted)")
}

// logTail returns the last n lines of a component's log, for error reports.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
