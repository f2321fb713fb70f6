package io.httpdns.android

import okhttp3.HttpUrl
import okhttp3.MediaType.Companion.toMediaType
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.RequestBody.Companion.toRequestBody
import java.io.File
import java.io.IOException
import java.security.SecureRandom
import java.util.ArrayDeque
import java.util.concurrent.ScheduledExecutorService
import java.util.concurrent.ScheduledFuture
import java.util.concurrent.TimeUnit

/** The events of `httpdns_client::events`, as the JSON objects `/app/events` takes. */
internal object Events {
    const val TIMEOUT = "HTTPDNS_TIMEOUT"
    const val UNREACHABLE = "HTTPDNS_UNREACHABLE"
    const val ERROR = "HTTPDNS_ERROR"
    const val EMPTY = "HTTPDNS_EMPTY"
    const val REFUSED = "HTTPDNS_REFUSED"

    private val random = SecureRandom()

    private fun ms(d: Long) = Math.min(Math.max(0, d), 600_000)

    fun dnsFallback(host: String, reason: String, durationMs: Long): MutableMap<String, Any?> =
        linkedMapOf("event" to "dns_fallback", "host" to host, "fallback_reason" to reason, "fallback_duration_ms" to ms(durationMs))

    /** `reason`: `5xx`, `connect_error` or `timeout`. */
    fun hostSwitch(from: String, to: String?, reason: String, durationMs: Long): MutableMap<String, Any?> =
        linkedMapOf<String, Any?>("event" to "host_switch", "from" to from, "to" to to, "reason" to reason, "duration_ms" to ms(durationMs))
            .also { if (to == null) it.remove("to") }

    fun hostRevive(host: String): MutableMap<String, Any?> = linkedMapOf("event" to "host_revive", "host" to host)

    /** `outcome`: `ok`, `4xx`, `5xx`, `connect_error`, `timeout`, `dns_error`. */
    fun request(host: String, outcome: String, latencyMs: Long, sampleRate: Double): MutableMap<String, Any?> =
        linkedMapOf("event" to "request", "host" to host, "outcome" to outcome, "latency_ms" to ms(latencyMs), "sample_rate" to sampleRate)

    fun localDnsCompare(host: String, localdns: List<String>, httpdns: List<String>): MutableMap<String, Any?> =
        linkedMapOf("event" to "localdns_compare", "host" to host, "localdns" to localdns, "httpdns" to httpdns)

    fun sampled(rate: Double): Boolean = when {
        rate >= 1.0 -> true
        rate <= 0.0 || rate.isNaN() -> false
        else -> random.nextDouble() < rate
    }
}

/** What a [Reporter] did so far (`ReporterStats`). */
class EventStats internal constructor(
    @get:JvmName("recorded") val recorded: Long,
    @get:JvmName("sent") val sent: Long,
    @get:JvmName("queued") val queued: Int,
    @get:JvmName("dropped") val dropped: Long,
    @get:JvmName("refused") val refused: Long,
    @get:JvmName("failedSends") val failedSends: Long,
    @get:JvmName("lastError") val lastError: String?,
) {
    override fun toString() = "events: recorded $recorded, sent $sent, queued $queued, dropped $dropped, refused $refused"
}

/**
 * The events reporter (`httpdns_client::events::Reporter`): [record] never waits (a bounded
 * queue, the oldest dropped and counted); batches go every `intervalMs` or when full, to the first
 * of `urls` that takes them, signed with the account (`?account=&t=&s=md5(sha256hex(body)-secret-t)`);
 * a failed send is retried after 1 s doubling to `maxBackoffMs`; a 400/413 batch is dropped. The
 * queue is kept in `file` (atomically) after every send and read back at start.
 */
internal class Reporter(
    private val urls: List<HttpUrl>,
    private val account: Account?,
    private val http: OkHttpClient,
    private val scheduler: ScheduledExecutorService,
    val batchSize: Int,
    private val intervalMs: Long,
    private val maxQueue: Int,
    val requestSampleRate: Double,
    private val file: File?,
    private val maxBackoffMs: Long,
    private val wallSeconds: () -> Long,
    /** The body's list key (`events`; `reports` for `/feedback`). */
    private val listKey: String = "events",
    /** Add `timestamp` and the device's sides (events); feedback reports go as recorded. */
    private val decorate: Boolean = true,
) {
    private val queue = ArrayDeque<Pair<Long, Map<String, Any?>>>()
    private var nextSeq = 0L
    private var recorded = 0L
    private var sent = 0L
    private var dropped = 0L
    private var refused = 0L
    private var failedSends = 0L
    private var lastError: String? = null
    private var preferred = 0
    private val sending = Any()
    @Volatile private var backoffMs = 0L
    @Volatile private var pending: ScheduledFuture<*>? = null
    @Volatile private var closed = false
    /** The queue changed since the file was last written (no write, no fsync, when idle). */
    @Volatile private var dirty = false

    /** Attached to every event: the device's side of `convergenceRate`, `httpdnsRate`, and the config version. */
    @Volatile var convergence: Boolean? = null
    @Volatile var httpdnsEnabled: Boolean? = null
    @Volatile var configVersion: Long? = null

    init {
        if (file != null && file.isFile) {
            try {
                val list = Json.asList(Json.parse(file.readText(Charsets.UTF_8)))
                if (list != null) for (v in list.takeLast(maxQueue)) Json.asObject(v)?.let { queue.addLast(nextSeq++ to it) }
            } catch (e: Exception) { /* a torn or foreign file is not ours */ }
        }
    }

    fun start() = schedule(intervalMs)

    private fun schedule(delayMs: Long) {
        if (closed) return
        synchronized(this) {
            pending?.cancel(false)
            pending = try { scheduler.schedule({ loopOnce() }, delayMs, TimeUnit.MILLISECONDS) } catch (e: Exception) { null }
        }
    }

    private fun loopOnce() {
        val failed = try { sendAll() != null } catch (e: Exception) { true }
        if (failed) {
            backoffMs = if (backoffMs == 0L) 1000 else Math.min(backoffMs * 2, maxBackoffMs)
            schedule(backoffMs)
        } else {
            backoffMs = 0
            schedule(intervalMs)
        }
    }

    /** Queues an event; never waits on the network. */
    fun record(event: MutableMap<String, Any?>) {
        if (decorate) {
            event["timestamp"] = wallSeconds()
            convergence?.let { event["convergence"] = it }
            httpdnsEnabled?.let { event["httpdns_enabled"] = it }
            configVersion?.let { event["config_version"] = it }
        }
        val full: Boolean
        synchronized(queue) {
            queue.addLast(nextSeq++ to event)
            while (queue.size > maxQueue) {
                queue.removeFirst()
                dropped++
            }
            recorded++
            dirty = true
            full = queue.size >= batchSize
        }
        if (full && backoffMs == 0L) schedule(0)
    }

    fun stats(): EventStats = synchronized(queue) { EventStats(recorded, sent, queue.size, dropped, refused, failedSends, lastError) }

    /** Sends every waiting batch now; null when all went, else the error. Blocking. */
    fun sendAll(): String? {
        synchronized(sending) {
            while (true) {
                val (n, err) = sendBatch()
                if (err != null) {
                    synchronized(queue) { failedSends++; lastError = err }
                    persist()
                    return err
                }
                if (n == 0) break
            }
            persist()
            return null
        }
    }

    private fun sendBatch(): Pair<Int, String?> {
        val batch: List<Pair<Long, Map<String, Any?>>> = synchronized(queue) { queue.take(batchSize) }
        if (batch.isEmpty()) return 0 to null
        val lastSeq = batch.last().first
        val body = Json.write(mapOf(listKey to batch.map { it.second }))
        fun dropSent(wasRefused: Boolean) = synchronized(queue) {
            var gone = 0
            while (queue.isNotEmpty() && queue.peekFirst()!!.first <= lastSeq) { queue.removeFirst(); gone++ }
            if (wasRefused) refused += gone else sent += gone
            dirty = true
        }
        if (urls.isEmpty()) return 0 to "no events URL"
        var last = ""
        for (i in urls.indices) {
            val idx = (preferred + i) % urls.size
            when (val r = post(urls[idx], body)) {
                null -> { preferred = idx; dropSent(false); return batch.size to null }
                else -> if (r.startsWith("refused")) { dropSent(true); return batch.size to r } else last = "${urls[idx]}: $r"
            }
        }
        return 0 to last
    }

    /** One POST; null when taken, `"refused: …"` for 400/413, else the retryable error. */
    private fun post(base: HttpUrl, body: String): String? {
        val b = base.newBuilder()
        if (account != null) {
            val t = wallSeconds() + 600
            val digest = Codec.hex(Hashes.sha256(body.toByteArray(Charsets.UTF_8)))
            b.addQueryParameter("account", account.id).addQueryParameter("t", t.toString())
                .addQueryParameter("s", Signing.signResolve(digest, account.secret, t))
        }
        val req = Request.Builder().url(b.build()).post(body.toRequestBody("application/json".toMediaType())).build()
        return try {
            http.newCall(req).execute().use { r ->
                when {
                    r.isSuccessful -> null
                    r.code == 400 || r.code == 413 -> "refused: ${r.code} ${r.body?.string()?.take(300)}"
                    else -> "status ${r.code}"
                }
            }
        } catch (e: IOException) {
            e.toString()
        }
    }

    private fun persist(final: Boolean = false) {
        val f = file ?: return
        if ((closed && !final) || !dirty) return
        val text = synchronized(queue) {
            dirty = false
            Json.write(queue.map { it.second })
        }
        try { Files.writeAtomic(f, text) } catch (e: Exception) { /* kept in memory */ }
    }

    fun close() {
        closed = true
        pending?.cancel(false)
        persist(final = true)
    }
}
