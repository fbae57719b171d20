"""The scheduler module of the inference server whose store-cache gate tests specify sluice's
gate, as those tests import it: the gate is sluice.Gate itself (every count is sluice's), and the
pressure mapping is one call to it."""
import sluice

_StoreCacheGate = sluice.Gate


class Scheduler:
    def adjust_store_cache_cap(self, level):
        gate = self._store_cache_gate
        if gate is not None:
            gate.adjust(level, self.config.max_num_seqs)
