"""Gate.admit_async under asyncio: many tasks, the count at every admission, timeouts,
cancellation racing a wake-up, threads and tasks waiting together, first come first served."""
import asyncio
import random
import subprocess
import sys
import threading

import pytest

import sluice


def run_python(code):
    """Runs code in an interpreter of its own: its exit code, its output, its errors."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def settle():
    """Waits for the gates' serving threads to end (each does once no waiter is left), so that
    an admission on its way to a cancelled waiter has gone back."""
    for t in threading.enumerate():
        if t.name == "sluice-admit-async":
            t.join()


@pytest.mark.parametrize("cap", [1, 2, 8])
def test_thousands_of_tasks_never_pass_the_cap(gate_type, cap):
    async def main():
        g = gate_type(cap)
        worst = 0

        async def task(i):
            nonlocal worst
            assert await g.admit_async()
            worst = max(worst, g.in_flight)
            assert g.in_flight <= g.cap
            await asyncio.sleep(0)
            g.note_done()

        await asyncio.gather(*(task(i) for i in range(3000)))
        return g, worst

    g, worst = asyncio.run(main())
    assert g.in_flight == 0 and worst == cap


def test_a_wait_that_times_out_counts_nothing(gate_type):
    async def main():
        g = gate_type(1)
        g.note_submitted()
        assert await g.admit_async(timeout=0.02) is False
        assert await g.admit_async(timeout=0) is False
        assert g.in_flight == 1
        g.note_done()
        assert await g.admit_async(timeout=0.02) is True
        assert g.in_flight == 1

    asyncio.run(main())


def test_cancellation_racing_note_done_never_consumes_an_admission(gate_type):
    async def main():
        rng = random.Random(3)
        g = gate_type(1)
        for _ in range(300):
            g.note_submitted()
            waiter = asyncio.create_task(g.admit_async())
            await asyncio.sleep(0)  # the task is waiting
            # note_done from another thread while the task is cancelled here: either wins
            t = threading.Thread(target=g.note_done)
            if rng.random() < 0.5:
                t.start()
                waiter.cancel()
            else:
                waiter.cancel()
                t.start()
            t.join()
            try:
                admitted = await waiter
            except asyncio.CancelledError:
                admitted = False
            if admitted:
                g.note_done()
            await asyncio.to_thread(settle)
            assert g.in_flight == 0  # nothing kept, whichever won

    asyncio.run(main())


def test_timeouts_with_wait_for_and_the_tasks_own_cancel(gate_type):
    async def main():
        g = gate_type(1)
        g.note_submitted()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(g.admit_async(), 0.02)
        g.note_done()
        await asyncio.to_thread(settle)  # an admission on its way to the timed-out waiter is back
        assert g.in_flight == 0
        assert await asyncio.wait_for(g.admit_async(), 1)
        assert g.in_flight == 1

    asyncio.run(main())


def test_threads_and_tasks_wait_on_one_gate(gate_type):
    g = gate_type(2)
    over = []

    def thread():
        for _ in range(300):
            with g.permit():
                if g.in_flight > 2:
                    over.append(g.in_flight)

    async def main():
        async def task():
            for _ in range(30):
                assert await g.admit_async()
                if g.in_flight > 2:
                    over.append(g.in_flight)
                await asyncio.sleep(0)
                g.note_done()

        await asyncio.gather(*(task() for _ in range(20)))

    threads = [threading.Thread(target=thread) for _ in range(4)]
    for t in threads:
        t.start()
    asyncio.run(main())
    for t in threads:
        t.join()
    assert over == [] and g.in_flight == 0


def test_waiting_tasks_are_served_first_come_first_served(gate_type):
    async def main():
        g = gate_type(1)
        g.note_submitted()
        order = []
        served = asyncio.Semaphore(0)

        async def task(i):
            await g.admit_async()
            order.append(i)
            served.release()

        tasks = []
        for i in range(20):
            tasks.append(asyncio.create_task(task(i)))
            await asyncio.sleep(0)  # task i is waiting before task i + 1 starts
        for _ in range(20):
            g.note_done()
            await asyncio.wait_for(served.acquire(), 10)  # one task served before the next room
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == list(range(20))


def test_a_loop_closed_with_waits_pending_leaves_the_gate_usable(gate_type):
    g = gate_type(1)
    g.note_submitted()
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda loop, context: None)  # "destroyed but pending": meant
    tasks = [loop.create_task(g.admit_async()) for _ in range(5)]
    loop.run_until_complete(asyncio.sleep(0.01))
    g.note_done()  # an admission on its way to a loop that will not run again
    loop.close()
    del tasks
    settle()  # whatever was admitted for the closed loop has come back
    assert g.in_flight == 0
    assert g.admit(timeout=5) is True


def test_bad_timeouts(gate_type):
    async def main():
        g = gate_type(1)
        for bad in (-1, float("nan")):
            with pytest.raises(ValueError):
                await g.admit_async(timeout=bad)
        with pytest.raises(TypeError):
            await g.admit_async(timeout="1")
        assert g.in_flight == 0

    asyncio.run(main())


EXIT_WHILE_WAITING = """
import asyncio, time, sluice
g = sluice.Gate(1)
g.note_submitted()

async def main():
    asyncio.ensure_future(g.admit_async())  # the serving thread waits on the full gate
    await asyncio.sleep(0.01)

asyncio.run(main())  # cancels the waiter; the serving thread is still inside its wait

class SlowToGo:  # finalization outlasts the serving thread's wait, which then ends
    def __del__(self):
        time.sleep(0.3)

keep = SlowToGo()
"""


def test_the_interpreter_exits_while_the_serving_thread_waits():
    for _ in range(3):
        code, _, err = run_python(EXIT_WHILE_WAITING)
        assert code == 0 and "terminate" not in err, err


def test_a_newcomer_waits_behind_the_waiters(gate_type):
    async def main():
        g = gate_type(1)
        g.note_submitted()
        order = []

        async def task(name):
            await g.admit_async()
            order.append(name)
            g.note_done()

        first = asyncio.create_task(task("first"))
        await asyncio.sleep(0)  # first is waiting
        g.note_done()  # room, on its way to first
        second = asyncio.create_task(task("second"))
        await asyncio.gather(first, second)
        return order

    assert asyncio.run(main()) == ["first", "second"]


SERVED_AFTER_MAIN_ENDS = """
import asyncio, threading, sluice
g = sluice.Gate(1)
g.note_submitted()
result = []
room = threading.Event()

def waiter():
    async def main():
        room.set()
        result.append(await g.admit_async(timeout=30))
        print("admitted" if result[0] else "not admitted", flush=True)
    asyncio.run(main())

def freer():
    room.wait()
    threading.Event().wait(0.2)
    g.note_done()

threading.Thread(target=waiter).start()
threading.Thread(target=freer).start()
"""  # the main thread ends here, with both threads running


def test_waiters_of_other_threads_are_served_after_the_main_thread_ends():
    code, out, err = run_python(SERVED_AFTER_MAIN_ENDS)
    assert code == 0 and out == "admitted\n", (out, err)


SERVED_IN_A_FORKED_CHILD = """
import asyncio, os, threading, sluice
g = sluice.Gate(1)
g.note_submitted()

async def parent():
    waiting = asyncio.ensure_future(g.admit_async())  # the serving thread runs at the fork
    await asyncio.sleep(0.01)
    pid = os.fork()
    if pid == 0:  # no loop of the parent's runs here: a loop of the child's own
        async def child():
            threading.Timer(0.2, g.note_done).start()
            return await g.admit_async(timeout=10)
        os._exit(0 if asyncio.new_event_loop().run_until_complete(child()) else 1)
    _, status = os.waitpid(pid, 0)
    g.note_done()
    await waiting
    print("child", os.waitstatus_to_exitcode(status), flush=True)

asyncio.run(parent())
"""


def test_a_forked_child_serves_its_own_waiters():
    code, out, err = run_python(SERVED_IN_A_FORKED_CHILD)
    assert code == 0 and out == "child 0\n", (out, err)


DAEMONS_LOOP_AT_EXIT = """
import asyncio, threading, sluice
g = sluice.Gate(1)
g.note_submitted()
loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()

async def main():
    mine = asyncio.ensure_future(g.admit_async(timeout=0.2))  # starts the serving thread
    await asyncio.sleep(0.05)
    asyncio.run_coroutine_threadsafe(g.admit_async(), loop)  # a daemon's waiter, behind it
    print(await mine, flush=True)

asyncio.run(main())
"""  # the interpreter does not wait for the daemon, nor may the serving thread


def test_a_daemon_threads_waiter_does_not_hold_the_interpreter_at_exit():
    code, out, err = run_python(DAEMONS_LOOP_AT_EXIT)
    assert code == 0 and out == "False\n", (out, err)


LOOP_IN_STEPS_AFTER_MAIN_ENDS = """
import asyncio, threading, time, sluice
g = sluice.Gate(1)
g.note_submitted()
started = threading.Event()

def worker():  # runs its loop in steps: between two, the loop is not running
    loop = asyncio.new_event_loop()
    task = loop.create_task(g.admit_async())
    loop.run_until_complete(asyncio.sleep(0))
    started.set()
    threading.main_thread().join()
    g.note_done()  # room once the main thread has ended
    while not task.done():
        loop.run_until_complete(asyncio.sleep(0.01))
        time.sleep(0.01)
    print(task.result(), flush=True)
    loop.close()

threading.Thread(target=worker).start()
started.wait()
"""


def test_a_loop_run_in_steps_is_served_after_the_main_thread_ends():
    code, out, err = run_python(LOOP_IN_STEPS_AFTER_MAIN_ENDS)
    assert code == 0 and out == "True\n", (out, err)
