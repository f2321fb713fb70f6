package io.httpdns.android

import okhttp3.MediaType.Companion.toMediaType
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.RequestBody.Companion.toRequestBody
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * The real `httpdns` binary (`-Dhttpdns.bin`, set by the `real-server` profile) as a child
 * process on loopback, with the admin API at hand. `env` and `configFile` add to the defaults.
 */
class RealServer(dir: File, env: Map<String, String> = emptyMap(), configFile: String? = null) : AutoCloseable {
    val token = "android-sdk-harness-token"
    private val http = OkHttpClient.Builder().readTimeout(10, TimeUnit.SECONDS).build()
    private val process: Process
    val base: String

    init {
        val log = File(dir, "httpdns.log")
        val args = mutableListOf(binary().absolutePath)
        if (configFile != null) {
            val f = File(dir, "httpdns.toml").apply { writeText(configFile) }
            args += listOf("--config", f.path)
        }
        args += "serve"
        val pb = ProcessBuilder(args).redirectErrorStream(true).redirectOutput(log)
        pb.environment().putAll(mapOf(
            "HTTPDNS_API_ADDR" to "127.0.0.1:0", "HTTPDNS_MIRROR_ADDR" to "off", "HTTPDNS_DNS_ADDR" to "off",
            "HTTPDNS_DATA_DIR" to File(dir, "data").path, "HTTPDNS_ADMIN_TOKEN" to token,
            "HTTPDNS_ALLOW_PRIVATE_NODE_IPS" to "true", "HTTPDNS_UPSTREAMS" to "off",
            "HTTPDNS_SYNC_INTERVAL_MS" to "100", "RUST_LOG" to "info",
        ) + env)
        process = pb.start()
        val end = System.nanoTime() + 30_000_000_000
        var found: String? = null
        while (found == null && System.nanoTime() < end) {
            val line = log.takeIf { it.isFile }?.readLines()?.firstOrNull { it.contains("Listening.") && it.contains("role=\"api\"") }
            if (line != null) found = "http://" + line.substringAfter("addr=").split(' ')[0] else Thread.sleep(50)
        }
        if (found == null) {
            process.destroy()
            error("httpdns did not start: ${log.readText()}")
        }
        base = found
    }

    fun admin(method: String, path: String, body: String? = null): Pair<Int, String> {
        val req = Request.Builder().url(base + path).header("Authorization", "Bearer $token")
            .method(method, body?.toRequestBody("application/json".toMediaType())).build()
        return http.newCall(req).execute().use { it.code to it.body!!.string() }
    }

    override fun close() {
        process.destroy()
        process.waitFor(10, TimeUnit.SECONDS)
    }

    companion object {
        fun binary(): File {
            val p = System.getProperty("httpdns.bin").orEmpty()
            require(p.isNotEmpty()) { "-Dhttpdns.bin=<path to the httpdns binary> is required" }
            val f = File(p)
            return listOf(f, File("..", p)).firstOrNull { it.canExecute() } ?: error("no executable httpdns at $p")
        }
    }
}
