"""sluice.PressureMonitor from Python: PSI files and cgroup directories written into tmp_path, the
levels at and around the thresholds, the cgroup's usage, the errors a poll raises (and the state it
leaves), clamped and refused arguments, parse_psi, a Gate and a Limiter following a monitor, the
GIL released while a poll waits, and the real /proc/pressure/memory where it can be read."""
import errno
import math
import os
import pathlib
import subprocess
import sys
import time

import pytest

import sluice

Pressure = sluice.Pressure


def psi_text(some10=0.0, full10=0.0, some_total=12345, full_total=0):
    return (f"some avg10={some10:.2f} avg60=1.50 avg300=0.25 total={some_total}\n"
            f"full avg10={full10:.2f} avg60=0.00 avg300=0.00 total={full_total}\n")


@pytest.fixture
def psi(tmp_path):
    """A PSI file, rewritten by calling the fixture's value with the averages wanted."""
    path = tmp_path / "memory"

    def write(some10=0.0, full10=0.0, **totals):
        path.write_text(psi_text(some10, full10, **totals))
        return path

    write()
    write.path = path
    return write


@pytest.fixture
def cgroup(tmp_path):
    """A cgroup v2 directory: memory.pressure, memory.current and memory.max."""
    path = tmp_path / "app.slice"
    path.mkdir()

    def write(current, maximum, some10=0.0, full10=0.0):
        (path / "memory.pressure").write_text(psi_text(some10, full10))
        (path / "memory.current").write_text(f"{current}\n")
        (path / "memory.max").write_text(f"{maximum}\n")
        return path

    write(0, "max")
    write.path = path
    return write


# ---- levels -------------------------------------------------------------------------------------

def test_the_levels_at_and_around_the_thresholds(psi):
    m = sluice.PressureMonitor(psi.path)  # soft_some 10, hard_full 10
    assert m.level == Pressure.OK  # before a poll
    assert m.reading == sluice.PressureReading()  # zeros
    for some10, full10, level in [(0, 0, Pressure.OK), (9.99, 0, Pressure.OK), (10, 0, Pressure.SOFT),
                                  (12, 0, Pressure.SOFT), (12, 9.99, Pressure.SOFT), (12, 10, Pressure.HARD),
                                  (0, 10, Pressure.HARD), (100, 100, Pressure.HARD), (0.5, 0, Pressure.OK)]:
        psi(some10, full10)
        assert m.poll() == level, (some10, full10)
        assert m.level == level
    psi(12, 0)
    assert m.poll() is not None and m.level == Pressure.SOFT
    r = m.reading
    assert (r.some_avg10, r.some_avg60, r.some_avg300, r.some_total) == (12.0, 1.5, 0.25, 12345)
    assert (r.full_avg10, r.full_avg60, r.full_avg300, r.full_total) == (0.0, 0.0, 0.0, 0)
    assert r.usage is None
    psi(0, 0)
    m.poll()
    assert r.some_avg10 == 12.0  # a snapshot: the next poll changes the monitor's, not this one
    assert m.reading.some_avg10 == 0.0


def test_thresholds_of_the_callers(psi):
    m = sluice.PressureMonitor(psi.path, soft_some=2.5, hard_full=50)
    psi(2.49, 49.99)
    assert m.poll() == Pressure.OK
    psi(2.5, 49.99)
    assert m.poll() == Pressure.SOFT
    psi(0, 50)
    assert m.poll() == Pressure.HARD
    zero = sluice.PressureMonitor(psi.path, soft_some=0, hard_full=100)
    psi(0, 99.99)
    assert zero.poll() == Pressure.SOFT  # 0 >= 0: soft from the start
    psi(0, 100)
    assert zero.poll() == Pressure.HARD


def test_a_file_without_a_full_line(psi):
    psi.path.write_text("some avg10=11.00 avg60=0.00 avg300=0.00 total=7\n")
    m = sluice.PressureMonitor(psi.path)
    assert m.poll() == Pressure.SOFT
    assert m.reading.full_avg10 == 0 and m.reading.full_total == 0 and m.reading.some_total == 7


def test_a_cgroups_usage(cgroup):
    path = cgroup(0, "max")
    m = sluice.PressureMonitor(path / "memory.pressure", cgroup=path)
    assert m.cgroup == str(path)
    assert m.poll() == Pressure.OK and m.reading.usage is None  # no limit: no usage
    for current, level in [(849, Pressure.OK), (850, Pressure.SOFT), (949, Pressure.SOFT), (950, Pressure.HARD),
                           (1000, Pressure.HARD), (2000, Pressure.HARD)]:
        cgroup(current, 1000)
        assert m.poll() == level, current
        assert m.reading.usage == current / 1000
    cgroup(0, 0)
    assert m.poll() == Pressure.HARD and m.reading.usage == 1.0  # a limit of 0 holds nothing: full
    cgroup(100, 1000, full10=10)
    assert m.poll() == Pressure.HARD and m.reading.usage == 0.1  # PSI alone
    cgroup(100, 1000, some10=10)
    assert m.poll() == Pressure.SOFT
    custom = sluice.PressureMonitor(path / "memory.pressure", cgroup=str(path), soft_usage=0.5, hard_usage=0.6)
    cgroup(500, 1000)
    assert custom.poll() == Pressure.SOFT
    cgroup(600, 1000)
    assert custom.poll() == Pressure.HARD
    cgroup(2**64 - 1, 2**64 - 1)  # the kernel's largest counts
    assert custom.poll() == Pressure.HARD and custom.reading.usage == 1.0


def test_no_cgroup_reads_no_usage(psi):
    for none in (None, ""):
        m = sluice.PressureMonitor(psi.path, cgroup=none)
        assert m.cgroup is None
        psi(0, 0)
        assert m.poll() == Pressure.OK and m.reading.usage is None


def test_level_of_a_reading_in_hand(psi):
    m = sluice.PressureMonitor(psi.path, soft_usage=0.5)
    assert m.level_of(sluice.PressureReading()) == Pressure.OK
    assert m.level_of(sluice.PressureReading(some_avg10=10)) == Pressure.SOFT
    assert m.level_of(sluice.PressureReading(full_avg10=10)) == Pressure.HARD
    assert m.level_of(sluice.PressureReading(usage=0.5)) == Pressure.SOFT
    assert m.level_of(sluice.PressureReading(usage=0.95)) == Pressure.HARD
    assert m.level_of(sluice.PressureReading(usage=0.49, some_avg10=9.99, full_avg10=9.99)) == Pressure.OK
    assert m.level == Pressure.OK and m.reading == sluice.PressureReading()  # nothing read, nothing kept
    psi(0, 30)
    assert m.level_of(m.reading) == Pressure.OK
    assert m.level_of(sluice.parse_psi(psi.path.read_text())) == m.poll() == Pressure.HARD
    with pytest.raises(TypeError, match="reading must be a sluice.PressureReading"):
        m.level_of("some avg10=0.00 avg60=0.00 avg300=0.00 total=0")


# ---- errors -------------------------------------------------------------------------------------

def test_a_missing_file_raises_file_not_found_and_leaves_the_last_poll(psi, tmp_path):
    psi(0, 20)
    m = sluice.PressureMonitor(psi.path)
    assert m.poll() == Pressure.HARD
    before = m.reading
    psi.path.unlink()
    with pytest.raises(FileNotFoundError) as caught:
        m.poll()
    assert caught.value.errno == errno.ENOENT
    assert caught.value.filename == str(psi.path)
    assert caught.value.strerror == os.strerror(errno.ENOENT)
    assert m.level == Pressure.HARD and m.reading == before  # as they were
    psi(0, 0)
    assert m.poll() == Pressure.OK  # the file back: polls again
    never = sluice.PressureMonitor(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        never.poll()
    assert never.level == Pressure.OK and never.reading == sluice.PressureReading()


def test_a_cgroup_file_missing_or_unreadable_names_itself(cgroup):
    path = cgroup(100, 1000)
    m = sluice.PressureMonitor(path / "memory.pressure", cgroup=path)
    assert m.poll() == Pressure.OK
    (path / "memory.max").unlink()
    with pytest.raises(FileNotFoundError) as caught:
        m.poll()
    assert caught.value.filename == str(path / "memory.max")
    (path / "memory.current").unlink()
    with pytest.raises(FileNotFoundError) as caught:
        m.poll()
    assert caught.value.filename == str(path / "memory.current")
    assert m.reading.usage == 0.1  # the last poll that read
    (path / "memory.current").mkdir()  # opens, then read() fails: EISDIR
    with pytest.raises(IsADirectoryError) as caught:
        m.poll()
    assert caught.value.errno == errno.EISDIR and caught.value.filename == str(path / "memory.current")


def test_what_the_kernel_does_not_write_raises_value_error(psi, cgroup):
    m = sluice.PressureMonitor(psi.path)
    psi(12, 12)
    assert m.poll() == Pressure.HARD
    before = m.reading
    for garbage in ["garbage\n", "", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                    "some avg10=1.00 avg60=1.00 total=1\n", "some avg10=x avg60=0.00 avg300=0.00 total=0\n",
                    "some avg10=1.00 avg60=0.00 avg300=0.00 total=-1\n",
                    psi_text() + psi_text()]:
        psi.path.write_text(garbage)
        with pytest.raises(ValueError, match="does not read as the kernel writes it"):
            m.poll()
        assert m.level == Pressure.HARD and m.reading == before
    path = cgroup(100, 1000)
    c = sluice.PressureMonitor(path / "memory.pressure", cgroup=path)
    for current, maximum, bad in [("abc", 1000, "memory.current"), (100, "-1", "memory.max"),
                                  (100, "unlimited", "memory.max"), ("", 1000, "memory.current")]:
        cgroup(current, maximum)
        with pytest.raises(ValueError, match=f"{bad} does not read"):
            c.poll()


# ---- arguments ----------------------------------------------------------------------------------

def test_thresholds_are_clamped_as_in_cpp(psi):
    m = sluice.PressureMonitor(psi.path)
    assert (m.soft_some, m.hard_full, m.soft_usage, m.hard_usage) == (10.0, 10.0, 0.85, 0.95)
    assert m.psi == str(psi.path) and m.cgroup is None
    nan = sluice.PressureMonitor(psi.path, soft_some=math.nan, hard_full=math.nan, soft_usage=math.nan,
                                 hard_usage=math.nan)
    assert (nan.soft_some, nan.hard_full, nan.soft_usage, nan.hard_usage) == (10.0, 10.0, 0.85, 0.95)
    high = sluice.PressureMonitor(psi.path, soft_some=250, hard_full=math.inf, soft_usage=2, hard_usage=10**400)
    assert (high.soft_some, high.hard_full, high.soft_usage, high.hard_usage) == (100.0, 100.0, 1.0, 1.0)
    low = sluice.PressureMonitor(psi.path, soft_some=-1, hard_full=-math.inf, soft_usage=-1, hard_usage=-(10**400))
    assert (low.soft_some, low.hard_full, low.soft_usage, low.hard_usage) == (0.0, 0.0, 0.0, 0.0)
    ints = sluice.PressureMonitor(psi.path, soft_some=5, hard_full=7, soft_usage=0, hard_usage=1)
    assert (ints.soft_some, ints.hard_full, ints.soft_usage, ints.hard_usage) == (5.0, 7.0, 0.0, 1.0)


def test_bad_arguments_are_refused(psi):
    for name in ("soft_some", "hard_full", "soft_usage", "hard_usage"):
        for bad in (True, False, "10", None, 1j):
            with pytest.raises(TypeError, match=f"{name} must be a number"):
                sluice.PressureMonitor(psi.path, **{name: bad})
    with pytest.raises(TypeError):
        sluice.PressureMonitor(psi.path, 10.0)  # the thresholds are keyword-only
    for bad in (5, None, 1.5, ["/proc/pressure/memory"]):
        with pytest.raises(TypeError, match="psi must be a str or os.PathLike"):
            sluice.PressureMonitor(bad)
    with pytest.raises(TypeError, match="cgroup must be a str or os.PathLike"):
        sluice.PressureMonitor(psi.path, cgroup=3)
    with pytest.raises(ValueError, match="null"):
        sluice.PressureMonitor("/proc/pressure/memory\0x")
    with pytest.raises(ValueError, match="null"):
        sluice.PressureMonitor(psi.path, cgroup="/sys\0")


def test_paths_as_os_fspath_takes_them(psi):
    class Custom:
        def __fspath__(self):
            return str(psi.path)

    for path in (psi.path, str(psi.path), os.fsencode(psi.path), Custom()):
        psi(11, 0)
        m = sluice.PressureMonitor(path)
        assert m.psi == str(psi.path)
        assert m.poll() == Pressure.SOFT
    assert sluice.PressureMonitor().psi == "/proc/pressure/memory"
    assert sluice.PressureMonitor(psi=psi.path).psi == str(psi.path)


def test_parse_psi():
    r = sluice.parse_psi("some avg10=12.00 avg60=1.50 avg300=0.25 total=12345\n"
                         "full avg10=3.10 avg60=0.00 avg300=0.00 total=99\n")
    assert isinstance(r, sluice.PressureReading)
    assert (r.some_avg10, r.some_avg60, r.some_avg300, r.some_total) == (12.0, 1.5, 0.25, 12345)
    assert (r.full_avg10, r.full_total, r.usage) == (pytest.approx(3.1), 99, None)
    assert sluice.parse_psi(text="some avg10=0.00 avg60=0.00 avg300=0.00 total=18446744073709551615").some_total \
        == 2**64 - 1
    for not_psi in ("", "garbage", "some avg10=0.00 avg60=0.00 avg300=0.00 total=18446744073709551616",
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0", "some avg10=1,5 avg60=0 avg300=0 total=0",
                    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0"):
        assert sluice.parse_psi(not_psi) is None, not_psi
    for bad in (b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0", None, 1):
        with pytest.raises(TypeError, match="text must be a str"):
            sluice.parse_psi(bad)


def test_readings_made_by_hand():
    r = sluice.PressureReading(some_avg10=1, some_total=2**70, usage=0.5)
    assert (r.some_avg10, r.some_total, r.usage) == (1.0, 2**64 - 1, 0.5)  # a total saturates
    assert r == sluice.PressureReading(some_avg10=1.0, some_total=2**64 - 1, usage=0.5)
    assert r != sluice.PressureReading(some_avg10=1.0, some_total=2**64 - 1)
    assert r != "a reading"
    assert repr(sluice.PressureReading(full_total=3)) == (
        "PressureReading(some_avg10=0.0, some_avg60=0.0, some_avg300=0.0, some_total=0, full_avg10=0.0, "
        "full_avg60=0.0, full_avg300=0.0, full_total=3, usage=None)")
    with pytest.raises(TypeError):
        sluice.PressureReading(1.0)  # keyword-only
    with pytest.raises(ValueError, match="some_avg60 must be a number, not NaN"):
        sluice.PressureReading(some_avg60=math.nan)
    with pytest.raises(ValueError, match="usage"):
        sluice.PressureReading(usage=math.nan)
    with pytest.raises(ValueError, match="full_total must be >= 0"):
        sluice.PressureReading(full_total=-1)
    with pytest.raises(TypeError, match="some_total must be an int"):
        sluice.PressureReading(some_total=1.0)
    with pytest.raises(TypeError, match="some_total must be an int, not bool"):
        sluice.PressureReading(some_total=True)
    with pytest.raises(TypeError, match="full_avg10 must be a number"):
        sluice.PressureReading(full_avg10="1")
    with pytest.raises(AttributeError):
        r.some_avg10 = 5.0  # read-only


# ---- following it -------------------------------------------------------------------------------

def test_a_gate_follows_the_monitor(psi):
    m = sluice.PressureMonitor(psi.path)
    g = sluice.Gate(8)
    psi(0, 50)
    for _ in range(3):
        g.adjust(m.poll(), 8)
    assert g.cap == 5  # -1 a poll at hard
    psi(20, 0)
    g.adjust(m.poll(), 8)
    assert g.cap == 4  # and at soft
    psi(0, 0)
    caps = []
    for _ in range(6):
        g.adjust(m.poll(), 8)
        caps.append(g.cap)
    assert caps == [5, 6, 7, 8, 8, 8]  # +1 a poll at ok, up to max_cap and no further


def test_a_limiter_follows_the_monitor(psi):
    m = sluice.PressureMonitor(psi.path)
    g = sluice.Gate(8)
    lim = sluice.Limiter(g, sluice.AIMD(), max=8)
    assert lim.pressure_cap == 8
    psi(0, 50)
    lim.adjust(m.poll())
    lim.adjust(m.poll())
    assert lim.pressure_cap == 6
    assert g.cap == lim.cap <= 6
    psi(0, 0)
    for _ in range(5):
        lim.adjust(m.poll())
    assert lim.pressure_cap == 8


# ---- files that are not the kernel's, the module's rules ---------------------------------------------------------------

def test_a_fifo_fails_the_poll_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError):  # opened without blocking: nothing read, so no 'some' line
        sluice.PressureMonitor(fifo).poll()


def test_objects_made_by_new_alone_refuse_every_call(psi):
    m = sluice.PressureMonitor.__new__(sluice.PressureMonitor)
    for call in (m.poll, lambda: m.level, lambda: m.reading, lambda: m.psi, lambda: repr(m),
                 lambda: m.level_of(sluice.PressureReading())):
        with pytest.raises(TypeError, match="not initialised"):
            call()
    r = sluice.PressureReading.__new__(sluice.PressureReading)
    with pytest.raises(TypeError, match="not initialised"):
        r.some_avg10
    with pytest.raises(TypeError, match="not initialised"):
        sluice.PressureMonitor(psi.path).level_of(r)
    real = sluice.PressureMonitor(psi.path)
    with pytest.raises(TypeError, match="class"):
        real.__class__ = sluice.Gate
    with pytest.raises(TypeError, match="class"):
        sluice.PressureReading().__class__ = sluice.GateStats
    with pytest.raises(TypeError):
        class Sub(sluice.PressureMonitor):  # final
            pass


def test_reprs(psi, cgroup):
    m = sluice.PressureMonitor(psi.path)
    assert repr(m) == f"<sluice.PressureMonitor psi={str(psi.path)!r} level=OK>"
    psi(0, 20)
    m.poll()
    assert repr(m) == f"<sluice.PressureMonitor psi={str(psi.path)!r} level=HARD>"
    path = cgroup(0, "max")
    c = sluice.PressureMonitor(path / "memory.pressure", cgroup=path)
    assert repr(c) == f"<sluice.PressureMonitor psi={str(path / 'memory.pressure')!r} cgroup={str(path)!r} level=OK>"
    assert repr(m.reading).startswith("PressureReading(some_avg10=0.0, some_avg60=1.5, some_avg300=0.25, some_total=")


def test_the_calls_have_docstrings():
    for cls in (sluice.PressureMonitor, sluice.PressureReading):
        assert cls.__doc__
        for name in dir(cls):
            if not name.startswith("_"):
                assert getattr(cls, name).__doc__, f"{cls.__name__}.{name}"
    assert sluice.parse_psi.__doc__


# ---- the system's -------------------------------------------------------------------------------

def test_the_systems_pressure_when_it_can_be_read():
    try:
        text = pathlib.Path("/proc/pressure/memory").read_text()
    except OSError as e:
        pytest.skip(f"/proc/pressure/memory: {e}")
    assert sluice.parse_psi(text) is not None
    m = sluice.PressureMonitor()
    level = m.poll()
    assert level in (Pressure.OK, Pressure.SOFT, Pressure.HARD) and level == m.level
    r = m.reading
    assert 0 <= r.some_avg10 <= 100 and 0 <= r.full_avg10 <= 100 and r.usage is None
    assert m.level_of(r) == level
    g = sluice.Gate(4)
    g.adjust(m.poll(), 4)  # whatever it reads, the gate takes it
    assert 1 <= g.cap <= 4


def test_the_docs_example_runs(tmp_path, monkeypatch):
    if not os.access("/proc/pressure/memory", os.R_OK):
        pytest.skip("/proc/pressure/memory cannot be read")
    root = pathlib.Path(__file__).resolve().parents[2]
    example = subprocess.run([sys.executable, root / "test" / "install" / "extract.py", root / "docs" / "python.md",
                              "pressure"], check=True, capture_output=True, text=True).stdout

    class Enough(Exception):
        pass

    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise Enough

    monkeypatch.setattr(time, "sleep", sleep)
    with pytest.raises(Enough):
        exec(compile(example, "python.md", "exec"), {"__name__": "__main__"})
    assert sleeps == [1, 1, 1]
