package io.httpdns.android

import okhttp3.HttpUrl
import okhttp3.MediaType.Companion.toMediaType
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.RequestBody.Companion.toRequestBody
import java.io.File
import java.io.IOException
import java.util.concurrent.TimeUnit

/**
 * The config document on the device (`httpdns_client::config_source`): the bundled default and
 * the kept file (verified again when the key is pinned), then the config center. A body is taken
 * only with a valid Ed25519 `X-Config-Signature` under the public key (pinned, or fetched once from
 * `/app/config-center/public-key`: that only protects against corruption), and when it parses and
 * validates; whatever the source, the larger `configVersion` wins. Accepted bodies are kept
 * atomically on disk.
 *
 * Requests: `POST` with `module`, `deviceId`, `configVersion`, `segment`, `platform` for this
 * device's rendering (with the server's `resolution` decision), and the conditional
 * `GET ...&wait=N` with `If-None-Match` as the push (long poll) where the server holds it.
 */
internal class ConfigStore(
    private val url: HttpUrl?,
    publicKey: String?,
    private val stateFile: File?,
    default: String?,
    private val http: OkHttpClient,
    private val deviceId: String,
    private val segment: String?,
    private val appVersion: String?,
) {
    enum class Origin { DEFAULT, FILE, SERVICE, PUSHED }

    class Active(val doc: ConfigDocument, val version: Long, val origin: Origin)

    @Volatile private var key: String? = publicKey
    @Volatile private var current: Active? = null
    /** The server's per-device decision, which may change without a new version. */
    @Volatile var decision: ResolutionDecision? = null
        private set
    @Volatile var listener: ((Active) -> Unit)? = null

    init {
        if (default != null) {
            val doc = ConfigDocument.parse(default)
            current = Active(doc, doc.configVersion, Origin.DEFAULT)
        }
        if (stateFile != null && stateFile.isFile) {
            try {
                val st = Json.parseObject(stateFile.readText(Charsets.UTF_8))
                val body = st.str("body")!!
                val sig = st.str("signature")!!
                val k = key
                if (k == null || Ed25519.verifyBase64(k, body.toByteArray(Charsets.UTF_8), sig)) {
                    install(ConfigDocument.parse(body), Origin.FILE, null)
                }
            } catch (e: Exception) { /* an unreadable or unverifiable kept file is ignored */ }
        }
    }

    fun current(): Active? = current

    /** Installs `doc` when its version is larger, keeping the signed body under the same lock. */
    @Synchronized
    private fun install(doc: ConfigDocument, origin: Origin, signed: Pair<String, String>?): Boolean {
        doc.resolution?.let { if (doc.configVersion >= (current?.version ?: 0)) decision = it }
        val cur = current
        if (cur != null && cur.version >= doc.configVersion) return false
        val a = Active(doc, doc.configVersion, origin)
        // Kept before it is in force: whoever sees the new version finds it on disk too.
        if (signed != null && stateFile != null) {
            val text = Json.write(linkedMapOf("origin" to origin.name.lowercase(), "body" to signed.first, "signature" to signed.second))
            try { Files.writeAtomic(stateFile, text) } catch (e: Exception) { /* kept in memory */ }
        }
        current = a
        listener?.invoke(a)
        return true
    }

    /** A signed document from another channel (a push); whether it is now in force. */
    fun offer(body: String, signature: String): Boolean {
        verify(body, signature)
        return install(ConfigDocument.parse(body), Origin.PUSHED, body to signature)
    }

    enum class Refresh { NOT_MODIFIED, UPDATED, NOT_NEWER }

    /** The per-device POST (or a plain GET without a device id). */
    fun refresh(): Refresh {
        val u = url ?: throw IOException("no config URL configured")
        val module = u.queryParameter("module") ?: "cdn"
        if (deviceId.isEmpty()) return poll(0)
        val body = linkedMapOf<String, Any?>("module" to module, "deviceId" to deviceId, "configVersion" to (current?.version ?: 0), "platform" to "android")
        segment?.let { body["segment"] = it }
        appVersion?.let { body["appVersion"] = it }
        val req = Request.Builder().url(u.newBuilder().query(null).build()).post(Json.write(body).toRequestBody("application/json".toMediaType())).build()
        return take(req, 10_000)
    }

    /** One conditional GET; `waitSeconds` > 0 asks the server to hold it until a newer version (long poll). */
    fun poll(waitSeconds: Int): Refresh {
        val u = url ?: throw IOException("no config URL configured")
        val b = u.newBuilder()
        if (waitSeconds > 0) b.setQueryParameter("wait", waitSeconds.toString())
        val rb = Request.Builder().url(b.build())
        current?.let { rb.header("If-None-Match", "\"${it.version}\"") }
        return take(rb.build(), 10_000L + waitSeconds * 1000L)
    }

    @Volatile private var inflight: okhttp3.Call? = null

    /** Cancels the request in progress (a held long poll), for close(). */
    fun cancel() {
        inflight?.cancel()
    }

    private fun take(req: Request, timeoutMs: Long): Refresh {
        val call = http.newCall(req)
        call.timeout().timeout(timeoutMs, TimeUnit.MILLISECONDS)
        inflight = call
        call.execute().use { r ->
            if (r.code == 304) return Refresh.NOT_MODIFIED
            if (r.code != 200) throw IOException("config center answered ${r.code}")
            val sig = r.header("X-Config-Signature") ?: throw IOException("unsigned config document")
            val body = r.body?.string() ?: ""
            verify(body, sig)
            val doc = ConfigDocument.parse(body)
            return if (install(doc, Origin.SERVICE, body to sig)) Refresh.UPDATED else Refresh.NOT_NEWER
        }
    }

    private fun verify(body: String, signature: String) {
        val k = key ?: fetchKey().also { key = it }
        if (!Ed25519.verifyBase64(k, body.toByteArray(Charsets.UTF_8), signature)) {
            throw IOException("the document's signature does not verify")
        }
    }

    private fun fetchKey(): String {
        val u = url ?: throw IOException("no public key and no config URL")
        val req = Request.Builder().url(u.newBuilder().encodedPath("/app/config-center/public-key").query(null).build()).build()
        http.newCall(req).execute().use { r ->
            if (!r.isSuccessful) throw IOException("public key: status ${r.code}")
            return Json.parseObject(r.body?.string() ?: "").str("public_key") ?: throw IOException("public key: no public_key")
        }
    }

    companion object {
        /** `http://host:port` means module `cdn` on the standard path; a full module-config URL is kept. */
        fun moduleUrl(text: String): HttpUrl? {
            val u = Answers.parseBase(text) ?: return null
            if (u.encodedPath == "/" || u.encodedPath.isEmpty()) {
                return u.newBuilder().encodedPath("/app/config-center/module-config").setQueryParameter("module", "cdn").build()
            }
            return u
        }
    }
}
