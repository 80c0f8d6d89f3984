from worker.main import end, main

end(main())
