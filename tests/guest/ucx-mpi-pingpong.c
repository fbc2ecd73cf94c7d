/* Two ranks: rank 0 sends messages of 8 B .. 64 KiB to rank 1, which checks and returns
 * them; then an allreduce. Prints "mpi ok" on rank 0 and exits 0 only if every byte arrived. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int rank, size, bad = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		fprintf(stderr, "needs 2 ranks, has %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	unsigned char *buf = malloc(65536);
	for (int len = 8; len <= 65536; len *= 2) {
		for (int iter = 0; iter < 20; iter++) {
			if (rank == 0) {
				for (int i = 0; i < len; i++)
					buf[i] = (unsigned char)(i * 13 + len + iter);
				MPI_Send(buf, len, MPI_BYTE, 1, iter, MPI_COMM_WORLD);
				MPI_Recv(buf, len, MPI_BYTE, 1, iter, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int i = 0; i < len; i++)
					bad += buf[i] != (unsigned char)(i * 13 + len + iter + 1);
			} else {
				MPI_Recv(buf, len, MPI_BYTE, 0, iter, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int i = 0; i < len; i++)
					bad += buf[i] != (unsigned char)(i * 13 + len + iter), buf[i]++;
				MPI_Send(buf, len, MPI_BYTE, 0, iter, MPI_COMM_WORLD);
			}
		}
	}
	int total = 0, sum = 0, one = rank + 1;
	MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi %s: %d bad bytes, allreduce %d\n", total || sum != 3 ? "WRONG" : "ok",
		       total, sum);
	free(buf);
	MPI_Finalize();
	return total || sum != 3;
}
