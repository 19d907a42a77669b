// Package procstat reads what a process has cost the machine from /proc:
// CPU time (utime + stime of /proc/PID/stat) and resident memory (VmRSS and
// the peak VmHWM of /proc/PID/status). The benchmark snapshots every
// service process and the PostgreSQL and RabbitMQ processes (found by
// command name) at both ends of a window and subtracts.
package procstat

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Groups of processes found by name rather than tracked by pid.
const (
	Postgres = "postgresql"
	RabbitMQ = "rabbitmq"
)

// Stat is one process at one moment.
type Stat struct {
	CPU time.Duration // user + system since the process started
	RSS uint64        // bytes resident now
	HWM uint64        // bytes, the peak resident set so far
}

// Reader converts clock ticks with the machine's CLK_TCK.
type Reader struct{ tick time.Duration }

// NewReader asks getconf for CLK_TCK (100 when it cannot).
func NewReader() *Reader {
	hz := 100.0
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			hz = v
		}
	}
	return &Reader{tick: time.Duration(float64(time.Second) / hz)}
}

// Read returns pid's stat; ok is false when the process is gone.
func (r *Reader) Read(pid int) (Stat, bool) {
	_, st, ok := r.read(pid)
	return st, ok
}

func (r *Reader) read(pid int) (string, Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", Stat{}, false
	}
	comm, ticks, ok := parseStat(b)
	if !ok {
		return "", Stat{}, false
	}
	st := Stat{CPU: time.Duration(ticks) * r.tick}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status"); err == nil {
		st.RSS = statusKB(b, "VmRSS:") * 1024
		st.HWM = statusKB(b, "VmHWM:") * 1024
	}
	return comm, st, true
}

// parseStat returns comm and utime+stime (ticks) of a /proc/PID/stat line.
func parseStat(b []byte) (string, uint64, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return "", 0, false
	}
	f := strings.Fields(string(b[end+2:]))
	// After "(comm) ": state is field 0, utime 11, stime 12.
	if len(f) < 13 {
		return "", 0, false
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return string(b[open+1 : end]), ut + st, true
}

// statusKB is the kB value of a /proc/PID/status line ("VmHWM:  1234 kB").
func statusKB(b []byte, key string) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				v, _ := strconv.ParseUint(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

// groupOf names the server a process belongs to by its command name.
func groupOf(comm string) string {
	switch comm {
	case "postgres":
		return Postgres
	case "beam.smp", "erl_child_setup", "epmd", "inet_gethost":
		return RabbitMQ
	}
	return ""
}

// Snapshot is every tracked process and every PostgreSQL and RabbitMQ
// process at one moment: name -> pid -> stat.
type Snapshot struct {
	At    time.Time
	Procs map[string]map[int]Stat
}

// Snapshot reads the named pids and scans /proc for the server groups.
func (r *Reader) Snapshot(tracked map[string]int) Snapshot {
	s := Snapshot{At: time.Now(), Procs: map[string]map[int]Stat{}}
	add := func(name string, pid int, st Stat) {
		if s.Procs[name] == nil {
			s.Procs[name] = map[int]Stat{}
		}
		s.Procs[name][pid] = st
	}
	for name, pid := range tracked {
		if st, ok := r.Read(pid); ok {
			add(name, pid, st)
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue
		}
		if g := groupOf(strings.TrimSpace(string(b))); g != "" {
			if _, st, ok := r.read(pid); ok {
				add(g, pid, st)
			}
		}
	}
	return s
}

// CPU is the CPU time name used between two snapshots: per pid, the later
// value minus the earlier one (the whole later value for a pid that started
// in between; nothing for one that ended).
func CPU(from, to Snapshot, name string) time.Duration {
	var d time.Duration
	for pid, st := range to.Procs[name] {
		if before, ok := from.Procs[name][pid]; ok {
			d += st.CPU - before.CPU
		} else {
			d += st.CPU
		}
	}
	return d
}

// HWM is the largest peak resident set of name's processes in a snapshot.
func HWM(s Snapshot, name string) uint64 {
	var m uint64
	for _, st := range s.Procs[name] {
		m = max(m, st.HWM)
	}
	return m
}

// RSS is the summed resident set of name's processes in a snapshot.
func RSS(s Snapshot, name string) uint64 {
	var sum uint64
	for _, st := range s.Procs[name] {
		sum += st.RSS
	}
	return sum
}

// LoadAverage is the 1-, 5- and 15-minute load average, as /proc/loadavg
// writes it.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// MachineCPU is jiffies of all CPUs since boot (/proc/stat), to say how
// busy the whole machine was over a window.
type MachineCPU struct {
	// Busy is every jiffy but idle and iowait, steal included.
	Busy uint64
	// Steal is time the hypervisor ran other guests while this machine
	// wanted to run: a virtual machine's cores are not all its own, and a
	// benchmark that does not say so overstates what its code costs.
	Steal uint64
	Total uint64
}

// ReadMachineCPU reads /proc/stat (zero when it cannot).
func ReadMachineCPU() MachineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return MachineCPU{}
	}
	var m MachineCPU
	var idle uint64
	// user nice system idle iowait irq softirq steal
	for i, v := range f[1:min(len(f), 9)] {
		n, _ := strconv.ParseUint(v, 10, 64)
		m.Total += n
		switch i {
		case 3, 4:
			idle += n
		case 7:
			m.Steal = n
		}
	}
	m.Busy = m.Total - idle
	return m
}

// Share is the busy and steal shares, in percent of one core (200 % is
// two cores), from m to later.
func (m MachineCPU) Share(later MachineCPU, cores int) (busy, steal float64) {
	// Multiplying before dividing keeps a fully busy machine at exactly
	// 100 % a core: the jiffy counts are integers, exact in a float64.
	total := float64(max(later.Total-m.Total, 1))
	share := func(jiffies uint64) float64 { return 100 * float64(cores) * float64(jiffies) / total }
	return share(later.Busy - m.Busy), share(later.Steal - m.Steal)
}
