/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "window.h"

#define ACK_TAG "ack\n"

int
perf_control(int ctl_fd, int ack_fd, const char *cmd)
{
	char msg[32], ack[16];
	size_t len, got = 0;
	ssize_t n;

	if (ctl_fd < 0)
		return 0;
	len = (size_t)snprintf(msg, sizeof(msg), "%s\n", cmd);
	do {
		n = write(ctl_fd, msg, len);
	} while (n < 0 && errno == EINTR);
	if (n != (ssize_t)len)
		return -1;
	/* perf answers "ack\n" followed by a NUL; read until the tag is complete */
	while (got < strlen(ACK_TAG)) {
		n = read(ack_fd, ack + got, sizeof(ack) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			errno = n == 0 ? EPIPE : errno;
			return -1;
		}
		got += (size_t)n;
	}
	ack[got] = '\0';
	if (strncmp(ack, ACK_TAG, strlen(ACK_TAG)) != 0) {
		errno = EPROTO;
		return -1;
	}
	return 0;
}
