package io.httpdns.android

import java.io.File
import java.io.FileOutputStream

/**
 * The answer cache, per network key and name, as `httpdns_client::cache`: fresh within the TTL,
 * the first use past 75% of it is told to refresh (one at a time; after a failed refresh the next
 * waits 5 s doubling to 5 min), expired entries are handed out for reuse. At most 4,096 entries,
 * the oldest go first. Pure: times are passed in (monotonic ms; the file holds wall-clock ms).
 */
internal class DnsCache {
    private class Entry(val ips: List<String>, val ttlMs: Long, val stored: Long) {
        var refreshing = false
        var failures = 0
        var retryAt: Long? = null
    }

    sealed class Lookup {
        class Fresh(val ips: List<String>, val remainingMs: Long, val refresh: Boolean) : Lookup()
        class Expired(val ips: List<String>, val ageMs: Long, val refresh: Boolean) : Lookup()
        object Miss : Lookup()
    }

    private val entries = HashMap<String, Entry>()

    private fun key(network: String, name: String) = "$network\u0000$name"

    @Synchronized
    fun size() = entries.size

    @Synchronized
    fun lookup(network: String, name: String, now: Long): Lookup {
        val e = entries[key(network, name)] ?: return Lookup.Miss
        val age = Math.max(0, now - e.stored)
        val due = e.retryAt.let { it == null || now >= it }
        val refresh = !e.refreshing && due && age * 4 >= e.ttlMs * 3
        if (refresh) e.refreshing = true
        return if (age < e.ttlMs) Lookup.Fresh(e.ips, e.ttlMs - age, refresh) else Lookup.Expired(e.ips, age - e.ttlMs, refresh)
    }

    @Synchronized
    fun insert(network: String, name: String, ips: List<String>, ttlMs: Long, now: Long) {
        val k = key(network, name)
        if (entries.size >= MAX_ENTRIES && !entries.containsKey(k)) {
            entries.minByOrNull { it.value.stored }?.let { entries.remove(it.key) }
        }
        entries[k] = Entry(ips, ttlMs, now)
    }

    @Synchronized
    fun refreshFailed(network: String, name: String, now: Long) {
        val e = entries[key(network, name)] ?: return
        e.refreshing = false
        e.failures++
        e.retryAt = now + backoffMs(e.failures)
    }

    @Synchronized
    fun refreshReleased(network: String, name: String) {
        entries[key(network, name)]?.refreshing = false
    }

    @Synchronized
    fun remove(network: String, name: String) {
        entries.remove(key(network, name))
    }

    /** The `limit` most recently stored names of `network`, for a re-resolve after a network change. */
    @Synchronized
    fun names(network: String, limit: Int): List<String> =
        entries.entries.filter { it.key.startsWith("$network\u0000") }.sortedByDescending { it.value.stored }
            .take(limit).map { it.key.substringAfter('\u0000') }

    /** The JSON the cache file holds: the Rust client's format (`{"version":1,"records":[...]}`). */
    @Synchronized
    fun toJson(now: Long, wallNow: Long): String {
        val records = entries.map { (k, e) ->
            val age = Math.max(0, now - e.stored)
            linkedMapOf(
                "network" to k.substringBefore('\u0000'), "name" to k.substringAfter('\u0000'),
                "ips" to e.ips, "ttl_ms" to e.ttlMs, "stored_unix_ms" to Math.max(0, wallNow - age),
            )
        }
        return Json.write(linkedMapOf("version" to 1, "records" to records))
    }

    companion object {
        const val MAX_ENTRIES = 4096

        fun backoffMs(failures: Int): Long = Math.min(5_000L shl Math.min(6, Math.max(0, failures - 1)), 300_000L)

        /** Loads what [toJson] wrote; entries expired longer than `keepExpiredMs` are dropped; garbage is an empty cache. */
        fun load(file: File?, now: Long, wallNow: Long, keepExpiredMs: Long): DnsCache {
            val cache = DnsCache()
            if (file == null || !file.isFile) return cache
            try {
                val m = Json.parseObject(file.readText(Charsets.UTF_8))
                for (r in m.list("records").take(MAX_ENTRIES)) {
                    val o = Json.asObject(r) ?: continue
                    val ips = o.strings("ips").filter { IpFilter.parse(it) != null }
                    val ttl = o.long("ttl_ms") ?: continue
                    val stored = o.long("stored_unix_ms") ?: continue
                    val age = Math.max(0, wallNow - stored)
                    if (age > ttl + keepExpiredMs || ips.isEmpty()) continue
                    cache.entries[cache.key(o.str("network") ?: continue, o.str("name") ?: continue)] = Entry(ips, ttl, now - age)
                }
            } catch (e: Exception) {
                return DnsCache()
            }
            return cache
        }
    }
}

/** Atomic writes: a crash leaves the old file or the new one, never half of one. */
internal object Files {
    private val seq = java.util.concurrent.atomic.AtomicLong()

    fun writeAtomic(file: File, text: String) {
        val dir = file.absoluteFile.parentFile
        dir.mkdirs()
        val tmp = File(dir, ".${file.name}.tmp.${seq.incrementAndGet()}.${System.nanoTime()}")
        try {
            FileOutputStream(tmp).use { out ->
                out.write(text.toByteArray(Charsets.UTF_8))
                out.fd.sync()
            }
            if (!tmp.renameTo(file)) throw java.io.IOException("rename of $tmp to $file failed")
        } finally {
            if (tmp.exists()) tmp.delete()
        }
    }
}
