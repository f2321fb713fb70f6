package io.httpdns.android

import io.httpdns.android.TestKit.Server
import io.httpdns.android.TestKit.json
import okhttp3.OkHttpClient
import okhttp3.HttpUrl.Companion.toHttpUrl
import okhttp3.mockwebserver.MockResponse
import okhttp3.mockwebserver.SocketPolicy
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit

@Timeout(60)
class EventsTest {
    private val scheduler = Executors.newSingleThreadScheduledExecutor()
    private val http = OkHttpClient.Builder().readTimeout(2, TimeUnit.SECONDS).build()

    private fun reporter(url: String, account: Account? = null, maxQueue: Int = 1000, file: File? = null, intervalMs: Long = 60_000) =
        Reporter(listOf("$url/app/events".toHttpUrl()), account, http, scheduler, 50, intervalMs, maxQueue, 1.0, file, 2_000, { 1_700_000_000L })

    @Test
    fun batchesAreSignedAndCarryTheDevicesSides() {
        Server { json("{}") }.use { s ->
            val r = reporter(s.url, Account("100000", "s3cr3t", null))
            r.convergence = true
            r.httpdnsEnabled = false
            r.configVersion = 7
            repeat(120) { r.record(Events.dnsFallback("a.example.com", Events.TIMEOUT, 120)) }
            assertNull(r.sendAll())
            assertEquals(3, s.requests.size, "batches of 50")
            val req = s.requests[0]
            val body = req.body.readUtf8()
            val u = req.requestUrl!!
            val t = u.queryParameter("t")!!.toLong()
            assertEquals(Signing.signResolve(Codec.hex(Hashes.sha256(body.toByteArray())), "s3cr3t", t), u.queryParameter("s"))
            val first = Json.asObject(Json.parseObject(body).list("events")[0])!!
            assertEquals("dns_fallback", first.str("event"))
            assertEquals("HTTPDNS_TIMEOUT", first.str("fallback_reason"))
            assertEquals(true, first.bool("convergence"))
            assertEquals(false, first.bool("httpdns_enabled"))
            assertEquals(7L, first.long("config_version"))
            assertEquals(1_700_000_000L, first.long("timestamp"))
            assertEquals(120L, r.stats().sent)
        }
    }

    @Test
    fun failuresAreRetriedRefusalsDroppedAndTheQueueBounded() {
        var code = 500
        Server { MockResponse().setResponseCode(code) }.use { s ->
            val r = reporter(s.url, maxQueue = 10)
            repeat(15) { r.record(Events.hostRevive("h$it")) }
            assertEquals(5L, r.stats().dropped)
            assertTrue(r.sendAll()!!.contains("500"))
            assertEquals(10, r.stats().queued, "kept for the next try")
            code = 400
            assertTrue(r.sendAll()!!.startsWith("refused: 400"))
            assertEquals(10L, r.stats().refused)
            assertEquals(0, r.stats().queued)
            // The background loop retries with backoff until the server takes the batch.
            code = 503
            val looping = reporter(s.url, intervalMs = 50)
            looping.record(Events.hostRevive("x"))
            looping.start()
            TestKit.eventually { s.requests.size >= 4 }
            code = 200
            TestKit.eventually(8000) { looping.stats().sent == 1L }
            looping.close()
        }
    }

    @Test
    fun recordingNeverWaitsOnAHangingServerAndTheQueueSurvivesARestart(@TempDir dir: File) {
        Server { MockResponse().setSocketPolicy(SocketPolicy.NO_RESPONSE) }.use { s ->
            val file = File(dir, "events.json")
            val r = reporter(s.url, file = file, intervalMs = 10)
            r.start()
            val t0 = System.nanoTime()
            repeat(500) { r.record(Events.request("cdn.example.com", "ok", 10, 1.0)) }
            assertTrue((System.nanoTime() - t0) / 1_000_000 < 500, "record() never waits on the network")
            r.close()
            scheduler.shutdownNow()
            scheduler.awaitTermination(5, TimeUnit.SECONDS)
            TestKit.eventually { file.isFile }
            val again = reporter(s.url, file = file)
            assertEquals(500, again.stats().queued)
        }
    }
}
