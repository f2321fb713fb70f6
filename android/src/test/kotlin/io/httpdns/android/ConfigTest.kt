package io.httpdns.android

import io.httpdns.android.TestKit.Server
import io.httpdns.android.TestKit.json
import okhttp3.mockwebserver.MockResponse
import okhttp3.mockwebserver.RecordedRequest
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.net.UnknownHostException
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

@Timeout(60)
class ConfigTest {
    private val signer = TestKit.Signer()

    private fun signed(body: String, sig: String = signer.sign(body)) =
        json(body).setHeader("X-Config-Signature", sig).setHeader("ETag", "\"${Json.parseObject(body).long("configVersion")}\"")

    private fun center(handler: (RecordedRequest) -> MockResponse) = Server(handler)

    @Test
    fun theLargerVersionWinsAndBadSignaturesAreRefused(@TempDir dir: File) {
        val bundled = TestKit.doc(2, listOf("default.cdn.com"))
        var served = TestKit.doc(5, listOf("five.cdn.com"))
        var sig: String? = null
        center { r -> if (r.method == "POST") signed(served, sig ?: signer.sign(served)) else MockResponse().setResponseCode(304) }.use { c ->
            fun sdk() = TestKit.builder().deviceId("device-0001").configUrl(c.url).configPublicKey(signer.publicKey)
                .defaultConfig(bundled).cacheDir(dir).longPollSeconds(0).build()
            sdk().use { s ->
                TestKit.eventually { s.configVersion() == 5L }
                assertEquals(listOf("five.cdn.com"), s.hostStates().keys.toList())
                val post = Json.parseObject(c.requests.first { it.method == "POST" }.body.readUtf8())
                assertEquals("device-0001", post.str("deviceId"))
                assertEquals("cdn", post.str("module"))
                assertEquals("android", post.str("platform"))
            }
            // A restart starts from the kept file, which beats the older default, even with the center down.
            served = TestKit.doc(1, listOf("one.cdn.com"))
            sdk().use { s ->
                assertEquals(5L, s.configVersion(), File(dir, "httpdns-config.json").let { if (it.isFile) it.readText() else "no file" })
                // Older than what is in force: not taken. Tampered: refused.
                assertFalse(s.offerConfig(served, signer.sign(served)))
                val six = TestKit.doc(6, listOf("six.cdn.com"))
                assertThrows<java.io.IOException> { s.offerConfig(six.replace("six", "evil"), signer.sign(six)) }
                assertThrows<java.io.IOException> { s.offerConfig(six, TestKit.Signer().sign(six)) }
                assertTrue(s.offerConfig(six, signer.sign(six)))
                assertEquals(6L, s.configVersion())
            }
            // A kept file edited on disk no longer verifies: ignored.
            val kept = File(dir, "httpdns-config.json")
            kept.writeText(kept.readText().replace("six.cdn.com", "evil.cdn.com"))
            sig = "AAAA"
            sdk().use { s -> assertEquals(2L, s.configVersion()) }
        }
    }

    @Test
    fun theLongPollDeliversANewVersionAtOnce() {
        val version = AtomicInteger(3)
        center { r ->
            val doc = TestKit.doc(version.get().toLong(), listOf("cdn.example.com"))
            when {
                r.method == "POST" -> signed(doc)
                r.getHeader("If-None-Match") == "\"${version.get()}\"" -> {
                    // Held until a newer version exists (the test publishes one), as the server's push.
                    val end = System.nanoTime() + 3_000_000_000
                    while (System.nanoTime() < end && r.getHeader("If-None-Match") == "\"${version.get()}\"") Thread.sleep(10)
                    if (r.getHeader("If-None-Match") == "\"${version.get()}\"") MockResponse().setResponseCode(304)
                    else signed(TestKit.doc(version.get().toLong(), listOf("cdn.example.com")))
                }
                else -> signed(doc)
            }
        }.use { c ->
            TestKit.builder().deviceId("d").configUrl(c.url).configPublicKey(signer.publicKey)
                .configIntervalMs(600_000).longPollSeconds(5).build().use { s ->
                TestKit.eventually { s.configVersion() == 3L }
                TestKit.eventually { c.requests.any { it.method == "GET" } }
                version.set(4)
                TestKit.eventually(3000) { s.configVersion() == 4L }
                val get = c.requests.first { it.method == "GET" }
                assertEquals("5", get.requestUrl!!.queryParameter("wait"))
                assertEquals("cdn", get.requestUrl!!.queryParameter("module"))
                assertEquals("/app/config-center/module-config", get.requestUrl!!.encodedPath)
            }
        }
    }

    @Test
    fun aServerWithoutLongPollIsPolledPlainly() {
        center { r ->
            if (r.method == "POST") signed(TestKit.doc(3, listOf("cdn.example.com"))) else MockResponse().setResponseCode(304)
        }.use { c ->
            TestKit.builder().deviceId("d").configUrl(c.url).configPublicKey(signer.publicKey)
                .configIntervalMs(600_000).longPollSeconds(5).build().use { s ->
                TestKit.eventually { s.configVersion() == 3L }
                Thread.sleep(500)
                assertEquals(1, c.requests.count { it.method == "GET" }, "no busy loop against an immediate 304")
            }
        }
    }

    @Test
    fun anUnpinnedKeyIsFetchedOnce() {
        center { r ->
            when (r.requestUrl!!.encodedPath) {
                "/app/config-center/public-key" -> json("""{"algorithm":"ed25519","public_key":"${signer.publicKey}"}""")
                else -> signed(TestKit.doc(9, listOf("cdn.example.com")))
            }
        }.use { c ->
            TestKit.builder().deviceId("d").configUrl("${c.url}/app/config-center/module-config?module=cdn").longPollSeconds(0).build().use { s ->
                TestKit.eventually { s.configVersion() == 9L }
                assertEquals(1, c.paths("/app/config-center/public-key").size)
            }
        }
    }

    @Test
    fun resolutionPolicyHttpdnsOffMeansLocalDnsAtOnce() {
        val doc = TestKit.doc(3, listOf("cdn.example.com"), extra = ""","resolution":{"httpdns":false,"localDnsFallback":true,"timeoutMs":500}""")
        Server { json(TestKit.answer("a.example.com", "127.0.0.1")) }.use { svc ->
            center { signed(doc) }.use { c ->
                val local = TestKit.FakeDns(mapOf("a.example.com" to listOf("127.0.0.9")))
                TestKit.builder(svc.url).deviceId("d").configUrl(c.url).configPublicKey(signer.publicKey).longPollSeconds(0)
                    .localDns(local).build().use { s ->
                    TestKit.eventually { s.configVersion() == 3L }
                    assertEquals(ResolutionPath.LOCALDNS, s.lookup("a.example.com").path)
                    assertEquals(0, svc.requests.size)
                    assertEquals(500L, s.service.timeoutMs)
                }
            }
        }
    }

    @Test
    fun localDnsFallbackOffMeansStaleOrNothing() {
        var up = true
        Server { if (up) json(TestKit.answer("a.example.com", "127.0.0.5", ttl = 10)) else MockResponse().setResponseCode(503) }.use { svc ->
            val doc = TestKit.doc(3, listOf("cdn.example.com"), extra = ""","resolution":{"httpdns":true,"localDnsFallback":false,"preResolveHosts":["a.example.com"]}""")
            val clock = TestKit.FakeClock()
            val local = TestKit.FakeDns(mapOf("a.example.com" to listOf("127.0.0.9"), "b.example.com" to listOf("127.0.0.9")))
            TestKit.builder(svc.url).deviceId("d").defaultConfig(doc).localDns(local).clock(clock).reuseExpired(false).build().use { s ->
                // preResolveHosts of the decision: resolved at start.
                TestKit.eventually { svc.requests.size == 1 }
                up = false
                clock.advance(60_000)
                assertEquals(ResolutionPath.STALE, s.lookup("a.example.com").path)
                assertThrows<UnknownHostException> { s.lookup("b.example.com") }
                assertTrue(local.asked.isEmpty(), "LocalDNS never asked")
            }
        }
    }

    @Test
    fun thePolicyBucketDecidesWhenTheServerDidNot() {
        val policy = ""","resolutionPolicy":{"default":{"httpdnsRate":0.5,"localDnsFallback":true},"segments":[{"segment":"premium","httpdnsRate":1}]}"""
        val d = ConfigDocument.parse(TestKit.doc(1, listOf("cdn.example.com"), extra = policy))
        // The vectors' httpdnsRate buckets: device-0001 and device-0002 fall on either side of 0.5.
        val buckets = TestKit.vectors("buckets.json").list("buckets").map { Json.asObject(it)!! }
            .filter { it.str("key") == "httpdnsRate" }.associate { it.str("deviceId")!! to it.long("bucket")!! }
        for ((dev, bucket) in buckets) {
            assertEquals(bucket < 5000, d.resolutionFor(null, dev).httpdns, dev)
            assertTrue(d.resolutionFor("premium", dev).httpdns)
        }
    }
}
