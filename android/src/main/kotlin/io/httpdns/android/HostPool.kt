package io.httpdns.android

/**
 * The ordered CDN host list and its health (seed `000` §3.3–3.4), as `httpdns_client::failover`:
 * a host is disabled after `consecutiveFailures` failures in a row; a disabled host is probed with
 * `HEAD` of the URL that failed on it after the longer of the revive interval and its ejection
 * time (`baseEjection × ejections`, capped), then every revive interval. Pure: times are passed in.
 */
class EjectionPolicy(
    @get:JvmName("consecutiveFailures") val consecutiveFailures: Int,
    @get:JvmName("baseEjectionMs") val baseEjectionMs: Long,
    @get:JvmName("maxEjectionMs") val maxEjectionMs: Long,
) {
    internal fun ejectionMs(ejections: Int): Long =
        Math.min(baseEjectionMs * ejections, Math.max(maxEjectionMs, baseEjectionMs))

    override fun toString() = "EjectionPolicy($consecutiveFailures, ${baseEjectionMs}ms, ${maxEjectionMs}ms)"

    companion object {
        /** Seed `000`: disable on the first failure, probe at the next revive interval. */
        @JvmField
        val SEED = EjectionPolicy(1, 0, 0)

        /** Envoy's outlier detection defaults: 5 failures, 30 s growing per ejection to 300 s. */
        @JvmField
        val ENVOY = EjectionPolicy(5, 30_000, 300_000)
    }
}

internal class HostPool(hosts: List<String>, private val policy: EjectionPolicy, now: Long) {
    enum class Effect { COUNTED, EJECTED, ALREADY_DISABLED }

    private class State(val host: String, now: Long) {
        var disabled = false
        var failures = 0
        var ejections = 0
        var probeAt = now
        var probeUrl: String? = null
    }

    private var hosts: MutableList<State> = hosts.map { State(it, now) }.toMutableList()

    @Synchronized
    fun setHosts(list: List<String>, now: Long) {
        val old = hosts.associateBy { it.host }
        hosts = list.map { old[it] ?: State(it, now) }.toMutableList()
    }

    @Synchronized
    fun hosts(): List<String> = hosts.map { it.host }

    @Synchronized
    fun candidates(): List<String> = hosts.filter { !it.disabled }.map { it.host }

    @Synchronized
    fun isDisabled(host: String): Boolean = hosts.any { it.host == host && it.disabled }

    @Synchronized
    fun reportSuccess(host: String) {
        hosts.firstOrNull { it.host == host }?.failures = 0
    }

    @Synchronized
    fun reportFailure(host: String, url: String, now: Long, reviveMs: Long): Effect {
        val h = hosts.firstOrNull { it.host == host } ?: return Effect.COUNTED
        if (h.disabled) return Effect.ALREADY_DISABLED
        h.failures++
        if (h.failures < Math.max(1, policy.consecutiveFailures)) return Effect.COUNTED
        h.disabled = true
        h.failures = 0
        h.ejections++
        h.probeAt = now + Math.max(reviveMs, policy.ejectionMs(h.ejections))
        h.probeUrl = url
        return Effect.EJECTED
    }

    /** Disabled hosts whose probe is due, with the URL to probe. */
    @Synchronized
    fun dueProbes(now: Long): List<Pair<String, String>> =
        hosts.filter { it.disabled && it.probeAt <= now && it.probeUrl != null }.map { it.host to it.probeUrl!! }

    @Synchronized
    fun probeResult(host: String, ok: Boolean, now: Long, reviveMs: Long) {
        val h = hosts.firstOrNull { it.host == host && it.disabled } ?: return
        if (ok) {
            h.disabled = false
            h.failures = 0
            h.probeUrl = null
        } else {
            h.probeAt = now + reviveMs
        }
    }

    @Synchronized
    fun nextProbeAt(): Long? = hosts.filter { it.disabled }.minOfOrNull { it.probeAt }
}
